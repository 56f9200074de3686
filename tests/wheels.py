"""Real wheels for tests, written directly (a wheel is a zip with a dist-info; no build backend
needed, so a wheelhouse of eight versions takes milliseconds and no network)."""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path


def build_wheel(folder: Path, name: str, version: str, files: dict[str, str]) -> Path:
    """``<name>-<version>-py3-none-any.whl`` holding ``files`` (path → text) in ``folder``."""
    dist_info = f"{name}-{version}.dist-info"
    entries = {
        **files,
        f"{dist_info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{dist_info}/WHEEL": (
            "Wheel-Version: 1.0\nGenerator: bloomperf-tests\nRoot-Is-Purelib: true\n"
            "Tag: py3-none-any\n"
        ),
    }
    record = []
    for path, text in entries.items():
        digest = hashlib.sha256(text.encode()).digest()
        encoded = base64.urlsafe_b64encode(digest).rstrip(b"=").decode()
        record.append(f"{path},sha256={encoded},{len(text.encode())}")
    record.append(f"{dist_info}/RECORD,,")
    entries[f"{dist_info}/RECORD"] = "\n".join(record) + "\n"
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, text in entries.items():
            archive.writestr(path, text)
    return wheel


def simple_index(root: Path, name: str, versions: list[str]) -> str:
    """A PEP 503 index of ``name``'s wheels in a folder, as a file:// URL."""
    wheels = root / "wheels"
    links = []
    for version in versions:
        wheel = build_wheel(wheels, name, version, {f"{name}/__init__.py": ""})
        links.append(f'<a href="{wheel.as_uri()}">{wheel.name}</a>')
    page = root / "simple" / name / "index.html"
    page.parent.mkdir(parents=True)
    page.write_text("<!DOCTYPE html><html><body>" + "".join(links) + "</body></html>")
    return (root / "simple").as_uri() + "/"


# Each torch.nn.Linear call of a slow version sleeps this long: about 9 calls per token on the
# tiny BLOOM make it several times slower, far beyond any noise of a shared CPU.
SLOW_LINEAR_S = 0.0005


def slowdown_package(folder: Path, name: str, version: str, slow: bool) -> Path:
    """A package whose import makes ``torch.nn.Linear.forward`` slower when ``slow``; its
    ``.pth`` file imports it at interpreter start, as a real package's hook would run."""
    source = f'''"""Test package {name} {version}."""
DELAY_S = {SLOW_LINEAR_S if slow else 0.0!r}


def _install():
    if not DELAY_S:
        return
    import time

    import torch

    original = torch.nn.Linear.forward

    def forward(self, *args, **kwargs):
        time.sleep(DELAY_S)
        return original(self, *args, **kwargs)

    torch.nn.Linear.forward = forward


_install()
'''
    return build_wheel(
        folder,
        name,
        version,
        {f"{name}/__init__.py": source, f"{name}-hook.pth": f"import {name}\n"},
    )

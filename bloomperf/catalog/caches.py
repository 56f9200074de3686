"""Where the libraries a worker runs keep their caches, and the build lock of DeepSpeed's ops.

Every worker group bloomperf starts gets its caches under bloomperf's own cache folder, never
torch's defaults: ``$TMPDIR/torchinductor_<user>`` (left behind by a clean run) or
``~/.cache/torch_extensions`` (shared with every other program of the machine).

DeepSpeed JIT-builds its ops through torch's extension builder, which serialises builds with a
plain ``lock`` file in the op's build folder (``torch.utils.file_baton.FileBaton``): created
with O_EXCL, removed when the build ends, and waited on, forever, while it exists. A build killed
half-way (a SIGKILLed run) leaves it, and from then on every later group hangs on it until its
load timeout. So bloomperf builds under its own lock instead, one that dies with its holder
(``flock`` on ``.bloomperf-build.lock`` in the extensions folder, held by the controller while a
group loads): whoever holds it knows that no other bloomperf build is running there, so any
``lock`` file it finds was left by a dead process; it removes it and says so.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from bloomperf.catalog.checkpoints import default_cache_dir
from bloomperf.core.errors import BloomperfError
from bloomperf.core.progress import emit
from bloomperf.core.storelock import flock_within

EXTENSIONS_ENV = "TORCH_EXTENSIONS_DIR"
BUILD_LOCK_NAME = ".bloomperf-build.lock"
BATON_NAME = "lock"  # torch.utils.cpp_extension's FileBaton in each op's build folder
# Cache folders of the libraries a worker runs (inductor, triton, ...): under bloomperf's cache.
LIBRARY_CACHES = {
    "TORCHINDUCTOR_CACHE_DIR": "torchinductor",
    "TRITON_CACHE_DIR": "triton",
    "CUDA_CACHE_PATH": "cuda-kernels",
}


def extensions_dir() -> Path:
    """``$TORCH_EXTENSIONS_DIR`` when the user set it, else bloomperf's own: one folder per
    Python environment (the current and reference profiles' torch builds would otherwise keep
    invalidating each other's build of the same op)."""
    configured = os.environ.get(EXTENSIONS_ENV)
    if configured:
        return Path(configured)
    environment = hashlib.sha256(sys.prefix.encode()).hexdigest()[:12]
    return default_cache_dir() / "torch_extensions" / environment


def worker_caches() -> dict[str, str]:
    """The cache settings of every worker group: its extensions folder and the library caches,
    where the user has not set them."""
    base = default_cache_dir()
    caches = {EXTENSIONS_ENV: str(extensions_dir())}
    for name, folder in LIBRARY_CACHES.items():
        caches[name] = os.environ.get(name) or str(base / folder)
    return caches


def stale_batons(folder: Path) -> list[Path]:
    """torch's build ``lock`` files in ``folder``'s op folders (stale when nobody builds)."""
    try:
        return sorted(p for p in folder.glob(f"*/{BATON_NAME}") if p.is_file())
    except OSError:
        return []


def baton_builders(baton: Path) -> list[int]:
    """PIDs of live processes building in the baton's op folder: torch's builder runs ninja
    (and ninja its compilers) with that folder as the working directory, so a baton with such
    a process is a build under way (one started outside bloomperf's lock, e.g. gpu_check.sh's
    background JIT build), not one left by a killed build."""
    import psutil

    folder = os.path.realpath(baton.parent)
    found = []
    for process in psutil.process_iter(["pid", "cwd"]):
        cwd = process.info.get("cwd")
        if cwd and (cwd == folder or cwd.startswith(folder + os.sep)):
            found.append(int(process.info["pid"]))
    return found


def build_in_progress(folder: Path) -> bool:
    """Whether a bloomperf process holds the build lock of ``folder`` now."""
    try:
        fd = os.open(folder / BUILD_LOCK_NAME, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)
    return False


@contextlib.contextmanager
def build_lock(folder: Path, wait_s: float) -> Iterator[list[Path]]:
    """Hold ``folder``'s build lock (waiting up to ``wait_s`` for another run's group to load);
    yields the stale ``lock`` files it found and removed."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(folder / BUILD_LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o666)
    except OSError as exc:
        raise BloomperfError(f"{folder}: cannot lock for building: {exc.strerror or exc}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            emit(f"waiting for another group to load (it holds {folder / BUILD_LOCK_NAME})")
            flock_within(fd, folder / BUILD_LOCK_NAME, wait_s, poll_s=0.2)
        removed = []
        for baton in stale_batons(folder):
            if baton_builders(baton):  # a build outside bloomperf's lock, still running
                continue
            with contextlib.suppress(FileNotFoundError):
                baton.unlink()
                removed.append(baton)
        try:
            yield removed
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)

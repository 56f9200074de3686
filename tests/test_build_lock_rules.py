"""Where a worker group's library caches go, and DeepSpeed's op builds under bloomperf's lock, by
value: torch's build ``lock`` files a dead build left are removed, a live build's are kept, and a
second run waits for the first one's group to load.

The live builder is a real process whose working folder is the op's build folder, as ninja's
is while torch's extension builder runs it.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from bloomperf.catalog.caches import (
    BATON_NAME,
    BUILD_LOCK_NAME,
    EXTENSIONS_ENV,
    LIBRARY_CACHES,
    baton_builders,
    build_in_progress,
    build_lock,
    extensions_dir,
    stale_batons,
    worker_caches,
)
from bloomperf.core import progress
from bloomperf.core.errors import BloomperfError


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv("BLOOMPERF_CACHE", str(folder))
    monkeypatch.delenv(EXTENSIONS_ENV, raising=False)
    for name in LIBRARY_CACHES:
        monkeypatch.delenv(name, raising=False)
    return folder


def test_the_extensions_folder_is_the_users_or_one_per_python_environment(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    digest = hashlib.sha256(sys.prefix.encode()).hexdigest()[:12]
    assert extensions_dir() == cache / "torch_extensions" / digest
    monkeypatch.setattr(sys, "prefix", "/opt/other-venv")
    other = hashlib.sha256(b"/opt/other-venv").hexdigest()[:12]
    assert extensions_dir() == cache / "torch_extensions" / other
    monkeypatch.setenv(EXTENSIONS_ENV, "/data/ext")
    assert extensions_dir() == Path("/data/ext")


def test_every_library_cache_is_under_bloomperfs_unless_the_user_set_it(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert worker_caches() == {
        EXTENSIONS_ENV: str(extensions_dir()),
        "TORCHINDUCTOR_CACHE_DIR": str(cache / "torchinductor"),
        "TRITON_CACHE_DIR": str(cache / "triton"),
        "CUDA_CACHE_PATH": str(cache / "cuda-kernels"),
    }
    monkeypatch.setenv("TRITON_CACHE_DIR", "/scratch/triton")
    monkeypatch.setenv("CUDA_CACHE_PATH", "")  # empty: not set
    caches = worker_caches()
    assert caches["TRITON_CACHE_DIR"] == "/scratch/triton"
    assert caches["CUDA_CACHE_PATH"] == str(cache / "cuda-kernels")


def op_folders(root: Path, *names: str) -> list[Path]:
    folders = [root / name for name in names]
    for folder in folders:
        folder.mkdir(parents=True)
    return folders


def test_stale_batons_are_the_lock_files_of_op_folders(tmp_path: Path) -> None:
    shm, adam, other = op_folders(tmp_path, "deepspeed_shm_comm", "cpu_adam", "other")
    for folder in (adam, shm):
        (folder / BATON_NAME).write_text("")
    (other / BATON_NAME).mkdir()  # a folder of that name is no baton
    (tmp_path / BATON_NAME).write_text("")  # nor a lock beside the op folders
    (adam / "build").mkdir()
    (adam / "build" / BATON_NAME).write_text("")  # nor one deeper down
    assert stale_batons(tmp_path) == [adam / BATON_NAME, shm / BATON_NAME]
    assert stale_batons(tmp_path / "missing") == []


@pytest.fixture
def builder(tmp_path: Path) -> Iterator[tuple[Path, int]]:
    """A live process working in an op's build folder (as ninja does)."""
    (folder,) = op_folders(tmp_path / "ext", "deepspeed_shm_comm")
    (folder / "build").mkdir()
    process = subprocess.Popen(["sleep", "60"], cwd=folder / "build")
    try:
        yield folder, process.pid
    finally:
        process.kill()
        process.wait()


def test_a_process_working_in_the_op_folder_is_its_builder(
    builder: tuple[Path, int], tmp_path: Path
) -> None:
    folder, pid = builder
    assert baton_builders(folder / BATON_NAME) == [pid]
    # A folder whose name only begins like the op folder's is another op's.
    (prefixed,) = op_folders(tmp_path / "ext", "deepspeed_shm_comm_v2")
    assert baton_builders(prefixed / BATON_NAME) == []


def test_a_build_is_in_progress_while_a_run_holds_the_lock(tmp_path: Path) -> None:
    assert not build_in_progress(tmp_path)  # no lock file yet
    path = tmp_path / BUILD_LOCK_NAME
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    try:
        assert not build_in_progress(tmp_path)
        fcntl.flock(fd, fcntl.LOCK_EX)
        assert build_in_progress(tmp_path)
    finally:
        os.close(fd)
    assert not build_in_progress(tmp_path)


def test_the_lock_removes_dead_builds_batons_and_keeps_a_live_ones(
    builder: tuple[Path, int],
) -> None:
    live, _ = builder
    root = live.parent
    (dead,) = op_folders(root, "cpu_adam")
    for folder in (live, dead):
        (folder / BATON_NAME).write_text("")
    with build_lock(root, wait_s=5) as removed:
        assert removed == [dead / BATON_NAME]
        assert build_in_progress(root)
    assert not (dead / BATON_NAME).exists() and (live / BATON_NAME).exists()
    assert not build_in_progress(root)


def test_a_second_run_waits_for_the_first_groups_load_and_says_so(tmp_path: Path) -> None:
    root = tmp_path / "ext"
    root.mkdir()
    fd = os.open(root / BUILD_LOCK_NAME, os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)  # another run's group loading
    released = threading.Event()

    def release() -> None:
        released.set()
        os.close(fd)

    lines: list[str] = []
    holder = threading.Timer(0.5, release)
    holder.start()
    progress.set_sink(lines.append)
    try:
        with build_lock(root, wait_s=60):
            assert released.is_set()
    finally:
        progress.set_sink(None)
    holder.join()
    assert len(lines) == 1
    assert lines[0].endswith(
        f"bloomperf: waiting for another group to load (it holds {root / BUILD_LOCK_NAME})"
    )


def test_a_load_that_holds_the_lock_past_the_wait_is_one_line(tmp_path: Path) -> None:
    root = tmp_path / "ext"
    root.mkdir()
    fd = os.open(root / BUILD_LOCK_NAME, os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        with pytest.raises(BloomperfError) as refused, build_lock(root, wait_s=0.3):
            pytest.fail("entered a build lock another run holds")
    finally:
        os.close(fd)
    assert str(refused.value) == (
        f"{root / BUILD_LOCK_NAME}: another writer held its lock for over 0.3 s"
    )


def test_a_folder_that_cannot_hold_the_lock_is_one_line(tmp_path: Path) -> None:
    afile = tmp_path / "afile"
    afile.write_text("")
    with pytest.raises(BloomperfError) as refused, build_lock(afile / "ext", wait_s=1):
        pytest.fail("locked under a file")
    assert str(refused.value) == f"{afile / 'ext'}: cannot lock for building: Not a directory"


def test_a_link_in_place_of_the_lock_file_is_never_followed(tmp_path: Path) -> None:
    """Another user's link planted as the lock file would make a run wait on (or hold) any
    file it points at: the link is not opened, so no build is said to be in progress."""
    elsewhere = tmp_path / "elsewhere.lock"
    fd = os.open(elsewhere, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        root = tmp_path / "ext"
        root.mkdir()
        (root / BUILD_LOCK_NAME).symlink_to(elsewhere)
        assert not build_in_progress(root)
        with (
            pytest.raises(BloomperfError, match="cannot lock for building"),
            build_lock(root, wait_s=0.2),
        ):
            pytest.fail("locked through a link")
    finally:
        os.close(fd)

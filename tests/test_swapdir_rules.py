"""A multi-file output (a report, a history site) replaced whole or not at all, by value: the
old folder or the new one, never a mix, whatever ends the block; and its one-line refusals."""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import re
import stat
import time
from pathlib import Path
from typing import Any

import pytest

from bloomperf.core import swapdir
from bloomperf.core.errors import BloomperfError
from bloomperf.core.swapdir import fresh_folder, swap_in


def ours(entry: Path) -> bool:
    return entry.name in {"index.html", "a.png", "b.png"}


def write(folder: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (folder / name).write_text(text)


def contents(folder: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(folder.iterdir())}


def leftovers(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if p.name.endswith(".tmp"))


def test_a_new_output_appears_whole_with_the_umasks_mode(tmp_path: Path) -> None:
    out = tmp_path / "deep" / "report"
    old_umask = os.umask(0o027)
    try:
        with fresh_folder(out, "--output", ours) as staging:
            assert staging.parent == out.parent and staging.name.startswith(".report.")
            write(staging, {"index.html": "new", "a.png": "A"})
            assert not out.exists()  # nothing shows before the block ends
    finally:
        os.umask(old_umask)
    assert contents(out) == {"a.png": "A", "index.html": "new"}
    assert stat.S_IMODE(out.stat().st_mode) == 0o750
    assert leftovers(out.parent) == []


def test_an_old_output_is_replaced_whole_not_merged(tmp_path: Path) -> None:
    out = tmp_path / "report"
    out.mkdir()
    write(out, {"index.html": "old", "b.png": "B"})
    with fresh_folder(out, "--output", ours) as staging:
        write(staging, {"index.html": "new", "a.png": "A"})
        assert contents(out) == {"b.png": "B", "index.html": "old"}
    assert contents(out) == {"a.png": "A", "index.html": "new"}
    assert leftovers(tmp_path) == []


def test_an_error_in_the_block_keeps_the_old_output_and_no_staging(tmp_path: Path) -> None:
    out = tmp_path / "report"
    out.mkdir()
    write(out, {"index.html": "old"})
    with pytest.raises(KeyboardInterrupt), fresh_folder(out, "--output", ours) as staging:
        write(staging, {"index.html": "half"})
        raise KeyboardInterrupt
    assert contents(out) == {"index.html": "old"}
    assert leftovers(tmp_path) == []


def test_a_link_to_the_output_stays_a_link_to_the_new_folder(tmp_path: Path) -> None:
    real = tmp_path / "sites" / "site"
    real.mkdir(parents=True)
    write(real, {"index.html": "old"})
    link = tmp_path / "site-link"
    link.symlink_to(real)
    with fresh_folder(link, "--site", ours) as staging:
        assert staging.parent == real.parent
        write(staging, {"index.html": "new"})
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert contents(real) == {"index.html": "new"}


def test_a_folder_holding_what_the_command_did_not_write_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "report"
    out.mkdir()
    write(out, {"index.html": "old", "notes.txt": "mine", "a thesis.pdf": "mine"})
    with pytest.raises(BloomperfError) as refused, fresh_folder(out, "-o", ours):
        pytest.fail("entered with a foreign file in the output")
    assert str(refused.value) == (
        f"-o {out}: holds 'a thesis.pdf', which this command did not write; name a new folder "
        "or one it wrote before (it is replaced whole)"
    )
    assert contents(out)["notes.txt"] == "mine"


def test_a_file_where_the_folder_goes_or_an_unmakeable_parent_is_one_line(tmp_path: Path) -> None:
    afile = tmp_path / "afile"
    afile.write_text("x")
    with pytest.raises(BloomperfError) as refused, fresh_folder(afile, "--output", ours):
        pytest.fail("entered with a file as the output")
    assert str(refused.value) == f"--output {afile}: not a folder"
    with pytest.raises(BloomperfError) as refused, fresh_folder(afile / "r", "-o", ours):
        pytest.fail("entered under a file")
    # mkdir of the parent, as the OS words it.
    assert str(refused.value) == f"-o {afile / 'r'}: cannot write: File exists"


def test_a_killed_writers_staging_is_removed_and_a_live_ones_kept(tmp_path: Path) -> None:
    out = tmp_path / "report"
    dead = tmp_path / ".report.deadbeef.tmp"
    live = tmp_path / ".report.livebeef.tmp"
    for folder in (dead, live):
        folder.mkdir()
        (folder / "index.html").write_text("half")
        old = time.time() - 60  # not brand new
        os.utime(folder, (old, old))
    held = os.open(live, os.O_RDONLY)
    fcntl.flock(held, fcntl.LOCK_EX)  # a writer still at work
    try:
        with fresh_folder(out, "--output", ours) as staging:
            write(staging, {"index.html": "new"})
        assert leftovers(tmp_path) == [live.name]
    finally:
        os.close(held)


def test_the_staging_folder_is_locked_while_written(tmp_path: Path) -> None:
    with fresh_folder(tmp_path / "report", "--output", ours) as staging:
        probe = os.open(staging, os.O_RDONLY)
        try:
            with pytest.raises(BlockingIOError):
                fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(probe)


# ---- the swap itself --------------------------------------------------------------------


def two_folders(tmp_path: Path) -> tuple[Path, Path]:
    staging, target = tmp_path / "staging", tmp_path / "target"
    staging.mkdir()
    target.mkdir()
    write(staging, {"index.html": "new"})
    write(target, {"index.html": "old", "a.png": "A"})
    return staging, target


def test_the_swap_exchanges_the_two_folders(tmp_path: Path) -> None:
    staging, target = two_folders(tmp_path)
    swap_in(staging, target)
    assert contents(target) == {"index.html": "new"}
    assert contents(staging) == {"a.png": "A", "index.html": "old"}
    empty = tmp_path / "empty"
    empty.mkdir()
    swap_in(staging, empty)  # onto an empty folder: a plain rename
    assert contents(empty) == {"a.png": "A", "index.html": "old"} and not staging.exists()


class NoExchange:
    """A C library whose renameat2 fails with ``code``, as on a file system without it."""

    def __init__(self, code: int) -> None:
        self.code = code
        self.calls: list[tuple[Any, ...]] = []

    def renameat2(self, *args: Any) -> int:
        self.calls.append(args)
        ctypes.set_errno(self.code)
        return -1


@pytest.mark.parametrize("code", [errno.EINVAL, errno.ENOSYS])
def test_without_an_atomic_exchange_three_renames_do_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    library = NoExchange(code)
    monkeypatch.setattr(swapdir.ctypes, "CDLL", lambda *a, **k: library)
    staging, target = two_folders(tmp_path)
    swap_in(staging, target)
    assert library.calls == [
        (swapdir.AT_FDCWD, os.fsencode(staging), swapdir.AT_FDCWD, os.fsencode(target), 2)
    ]
    assert contents(target) == {"index.html": "new"}
    assert contents(staging) == {"a.png": "A", "index.html": "old"}
    assert leftovers(tmp_path) == []


def test_a_c_library_without_renameat2_renames_three_times(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(swapdir.ctypes, "CDLL", lambda *a, **k: object())
    staging, target = two_folders(tmp_path)
    swap_in(staging, target)
    assert contents(target) == {"index.html": "new"}
    assert contents(staging) == {"a.png": "A", "index.html": "old"}


def test_an_exchange_that_fails_otherwise_raises_its_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(swapdir.ctypes, "CDLL", lambda *a, **k: NoExchange(errno.EPERM))
    staging, target = two_folders(tmp_path)
    with pytest.raises(OSError) as failed:
        swap_in(staging, target)
    assert (failed.value.errno, failed.value.filename) == (errno.EPERM, str(target))
    assert contents(target) == {"a.png": "A", "index.html": "old"}  # left as it was
    # Through fresh_folder: the option, the path and the reason, in one line.
    with pytest.raises(BloomperfError) as refused, fresh_folder(target, "--output", ours) as new:
        write(new, {"index.html": "new"})
    assert str(refused.value) == f"--output {target}: cannot write: Operation not permitted"
    assert contents(target) == {"a.png": "A", "index.html": "old"}


def test_a_rename_that_fails_for_another_reason_is_not_taken_for_a_full_folder(
    tmp_path: Path,
) -> None:
    staging = tmp_path / "staging"
    staging.mkdir()
    (tmp_path / "afile").write_text("x")
    with pytest.raises(NotADirectoryError):
        swap_in(staging, tmp_path / "afile" / "target")


def test_a_stop_between_the_fallbacks_renames_leaves_what_the_next_write_removes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without an atomic exchange the old folder is first renamed aside: stopped right then, it
    must be a temporary of the output's (``.NAME.XXXXXXXX.tmp`` beside it), which the next
    write of that output removes, not a stray folder elsewhere."""
    monkeypatch.setattr(swapdir.ctypes, "CDLL", lambda *a, **k: object())  # no renameat2
    staging, target = two_folders(tmp_path)
    real_rename = os.rename
    renames: list[str] = []

    def rename(source: Any, destination: Any) -> None:
        renames.append(str(destination))
        if len(renames) == 3:  # after "staging onto target" (refused) and "target aside"
            raise KeyboardInterrupt
        real_rename(source, destination)

    monkeypatch.setattr(swapdir.os, "rename", rename)
    with pytest.raises(KeyboardInterrupt):
        swap_in(staging, target)
    monkeypatch.setattr(swapdir.os, "rename", real_rename)
    (aside,) = [p for p in tmp_path.iterdir() if p.name not in ("staging",)]
    assert re.fullmatch(r"\.target\.[a-z0-9_]{8}\.tmp", aside.name), aside.name
    assert contents(aside) == {"a.png": "A", "index.html": "old"}
    old = time.time() - 60
    os.utime(aside, (old, old))  # a killed writer's, not brand new
    with fresh_folder(target, "--output", ours) as new:
        write(new, {"index.html": "newer"})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["staging", "target"]

"""The lock folder and a store's writer lock, by value: where locks live, which folders may hold
them, one lock per real folder, the wait and its one-line refusals.

Another holder of a lock is another open file description (``flock`` locks are per open file,
so a second ``os.open`` in this process conflicts as another process would).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import stat
import tempfile
import threading
from pathlib import Path

import pytest

from bloomperf.core import lockdir, storelock
from bloomperf.core.errors import BloomperfError
from bloomperf.core.lockdir import (
    LOCK_DIR_ENV,
    lock_folder,
    lock_folder_problem,
    make_lock_folder,
)
from bloomperf.core.storelock import (
    flock_within,
    store_lock,
    store_lock_path,
    store_locks,
)
from tests.users import NOBODY, as_nobody

ADVICE = "fix its permissions"

# ---- where the locks live ----------------------------------------------------------------


def test_the_variable_names_the_lock_folder_and_empty_is_unset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(LOCK_DIR_ENV, str(tmp_path / "mine"))
    assert lock_folder() == tmp_path / "mine"
    monkeypatch.setenv(LOCK_DIR_ENV, "")
    monkeypatch.setattr(lockdir, "SHARED_BASES", (tmp_path,))
    assert lock_folder() == tmp_path / "bloomperf-locks"


def test_the_first_usable_shared_base_wins_and_home_is_the_last_resort(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(LOCK_DIR_ENV, raising=False)
    missing, linked, real, later = (tmp_path / n for n in ("missing", "link", "real", "later"))
    real.mkdir()
    later.mkdir()
    linked.symlink_to(real)
    afile = tmp_path / "afile"
    afile.write_text("")
    monkeypatch.setattr(lockdir, "SHARED_BASES", (missing, afile, linked, real, later))
    assert lock_folder() == real / "bloomperf-locks"
    monkeypatch.setattr(lockdir, "SHARED_BASES", (missing, afile, linked))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert lock_folder() == tmp_path / "home" / ".cache" / "bloomperf" / "locks"


def test_a_shared_base_this_user_may_not_write_is_passed_over(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(LOCK_DIR_ENV, raising=False)
    # Under /tmp, which nobody may enter (pytest's tmp_path is root's own, 0700).
    top = Path(tempfile.mkdtemp(prefix="bloomperf-bases-", dir="/tmp"))
    try:
        top.chmod(0o755)
        closed, open_ = top / "closed", top / "open"
        closed.mkdir(mode=0o755)
        open_.mkdir()
        open_.chmod(0o1777)
        monkeypatch.setattr(lockdir, "SHARED_BASES", (closed, open_))
        # nobody may not write root's 0755 folder: the sticky one open to all is next.
        assert as_nobody(lambda: str(lock_folder())) == str(open_ / "bloomperf-locks")
        assert lock_folder() == closed / "bloomperf-locks"
    finally:
        shutil.rmtree(top)


# ---- which folders may hold locks ----------------------------------------------------------


def test_a_new_lock_folder_is_private_or_shared_by_where_it_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    private = tmp_path / "a" / "b" / "locks"
    make_lock_folder(private, ADVICE)
    assert stat.S_IMODE(private.stat().st_mode) == 0o700
    monkeypatch.setattr(lockdir, "SHARED_BASES", (tmp_path,))
    shared = tmp_path / "bloomperf-locks"
    make_lock_folder(shared, ADVICE)
    assert stat.S_IMODE(shared.stat().st_mode) == 0o1777  # past the umask
    make_lock_folder(shared, ADVICE)  # there already: accepted as it is


@pytest.mark.parametrize(
    ("mode", "problem"),
    [
        (0o700, None),
        (0o755, None),
        (0o1777, None),
        (0o1770, None),
        (0o777, "others may write to it and it has no sticky bit"),
        (0o775, "others may write to it and it has no sticky bit"),
        (0o757, "others may write to it and it has no sticky bit"),
    ],
)
def test_a_folder_others_may_write_holds_locks_only_when_sticky(
    tmp_path: Path, mode: int, problem: str | None
) -> None:
    folder = tmp_path / "locks"
    folder.mkdir()
    folder.chmod(mode)
    assert lock_folder_problem(os.lstat(folder)) == problem
    if problem is None:
        make_lock_folder(folder, ADVICE)
    else:
        with pytest.raises(BloomperfError) as refused:
            make_lock_folder(folder, ADVICE)
        assert str(refused.value) == (
            f"{folder}: refusing it as the lock folder: {problem}; set {LOCK_DIR_ENV} to a "
            f"folder of yours or {ADVICE}"
        )


def test_a_link_or_a_file_is_no_lock_folder(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(real)
    afile = tmp_path / "afile"
    afile.write_text("")
    assert lock_folder_problem(os.lstat(link)) == "it is a symbolic link"
    assert lock_folder_problem(os.lstat(afile)) == "it is not a folder"
    with pytest.raises(BloomperfError, match="refusing it as the lock folder: it is a symbolic"):
        make_lock_folder(link, ADVICE)


def test_another_users_folder_holds_locks_only_when_shared_on_purpose(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.fail("chown to another user needs root (CI runs as root)")
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o700)
    os.chown(theirs, NOBODY, NOBODY)
    assert lock_folder_problem(os.lstat(theirs)) == f"it belongs to another user (uid {NOBODY})"
    theirs.chmod(0o1777)  # sticky and open to all: the shared default someone else created
    assert lock_folder_problem(os.lstat(theirs)) is None
    theirs.chmod(0o1775)  # sticky, not open to all: still theirs
    assert lock_folder_problem(os.lstat(theirs)) == f"it belongs to another user (uid {NOBODY})"
    theirs.chmod(0o777)  # open to all but not sticky: theirs, whatever else is wrong with it
    assert lock_folder_problem(os.lstat(theirs)) == f"it belongs to another user (uid {NOBODY})"
    roots = tmp_path / "roots"
    roots.mkdir(mode=0o755)
    info = os.lstat(roots)  # root's own folder, as nobody sees it
    assert as_nobody(lambda: lock_folder_problem(info)) is None


def test_a_lock_folder_another_run_makes_at_the_same_moment_is_accepted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two runs starting together: both find no folder, the other makes it first."""
    folder = tmp_path / "locks"
    folder.mkdir(mode=0o700)
    monkeypatch.setattr(lockdir.os.path, "lexists", lambda path: False)  # looked just before
    make_lock_folder(folder, ADVICE)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700


def test_a_lock_folder_that_cannot_be_made_says_what_to_do(tmp_path: Path) -> None:
    afile = tmp_path / "afile"
    afile.write_text("")
    with pytest.raises(BloomperfError) as refused:
        make_lock_folder(afile / "locks", "free the disk")
    assert str(refused.value) == (
        f"{afile / 'locks'}: cannot create the lock folder (Not a directory); set "
        f"{LOCK_DIR_ENV} to a writable folder or free the disk"
    )


# ---- a store's writer lock ------------------------------------------------------------------


@pytest.fixture
def locks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "locks"
    monkeypatch.setenv(LOCK_DIR_ENV, str(folder))
    return folder


def held_by_another(path: Path) -> int:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return fd


def is_held(path: Path) -> bool:
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def test_one_lock_file_per_real_folder_in_the_lock_folder(tmp_path: Path, locks: Path) -> None:
    store = tmp_path / "baselines"
    store.mkdir()
    link = tmp_path / "link"
    link.symlink_to(store)
    path = store_lock_path(store)
    assert path.parent == locks
    assert path.name.startswith("bloomperf-store-") and path.name.endswith(".lock")
    assert len(path.name) == len("bloomperf-store-.lock") + 16
    assert store_lock_path(link) == store_lock_path(tmp_path / "x" / ".." / "baselines") == path
    assert store_lock_path(tmp_path / "history") != path


def test_the_lock_is_held_for_the_block_only_and_the_folder_made(
    tmp_path: Path, locks: Path
) -> None:
    store = tmp_path / "new" / "history"
    with store_lock(store):
        assert store.is_dir() and list(store.iterdir()) == []  # the folder holds no lock file
        assert is_held(store_lock_path(store))
    assert not is_held(store_lock_path(store))


def test_a_writer_waits_for_the_holder_then_writes(tmp_path: Path, locks: Path) -> None:
    store = tmp_path / "store"
    with store_lock(store):
        pass  # the lock file exists
    fd = held_by_another(store_lock_path(store))
    released = threading.Event()

    def release() -> None:
        released.set()  # before the lock is let go: whoever gets it after sees the event
        os.close(fd)

    holder = threading.Timer(0.3, release)
    holder.start()
    with store_lock(store, wait_s=60):
        assert released.is_set()  # entered only once the holder let go
        assert is_held(store_lock_path(store))
    holder.join()


def test_a_holder_that_stays_is_one_line_after_the_wait(tmp_path: Path, locks: Path) -> None:
    store = tmp_path / "store"
    with store_lock(store):
        pass
    fd = held_by_another(store_lock_path(store))
    try:
        with pytest.raises(BloomperfError) as refused, store_lock(store, wait_s=0.25):
            pytest.fail("entered a lock another holds")
        assert str(refused.value) == f"{store}: another writer held its lock for over 0.25 s"
    finally:
        os.close(fd)


def test_several_folders_are_locked_once_each_in_one_order(
    tmp_path: Path, locks: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    for folder in (a, b):
        folder.mkdir()
    link = tmp_path / "link-to-a"
    link.symlink_to(a)
    taken: list[str] = []

    def recording(folder: Path, wait_s: float) -> object:
        taken.append(Path(folder).name)
        return store_lock(folder, wait_s)

    monkeypatch.setattr(storelock, "store_lock", recording)
    # Two spellings of a: one lock (a second flock of it here would wait on the first).
    with store_locks([b, link, a], wait_s=0.5):
        assert is_held(store_lock_path(a)) and is_held(store_lock_path(b))
    assert taken == ["a", "b"]
    assert not is_held(store_lock_path(a))


def test_a_folder_that_cannot_be_made_or_locked_is_one_line(tmp_path: Path, locks: Path) -> None:
    afile = tmp_path / "afile"
    afile.write_text("")
    with pytest.raises(BloomperfError) as refused, store_lock(afile / "store"):
        pytest.fail("locked a folder under a file")
    assert str(refused.value) == f"{afile / 'store'}: cannot lock for writing: Not a directory"
    fd = os.open(tmp_path, os.O_RDONLY)
    os.close(fd)
    with pytest.raises(BloomperfError) as bad:
        flock_within(fd, tmp_path, 1.0)  # a closed descriptor: no waiting on it
    assert str(bad.value) == f"{tmp_path}: cannot lock: Bad file descriptor"

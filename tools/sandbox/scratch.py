"""A sandbox run's scratch dir, which a killed server's successor finds and removes.

    with scratch_dir(parent) as work: ...    # a fresh dir, locked while in use, removed after
    remove_stale(parent)                     # at start-up: the dirs of runs whose server died

Each dir is flock()ed by the server for as long as its run lasts. The kernel drops that lock
when the server dies, however it dies, so `remove_stale` removes exactly the dirs whose lock
it can take: never one that another live server sharing the data dir is using, and no pid
that could have been reused is trusted. A dir is made under a pending name, locked, then
renamed, so under its final name a dir is always either held or abandoned; a pending one that
a cleaner locks first is left to the cleaner and another is made.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

PREFIX = "chat-agent-sandbox-"
PENDING = ".pending"  # suffix of a dir not yet locked by its maker
_ATTEMPTS = 5


@contextlib.contextmanager
def scratch_dir(parent: Path | None = None) -> Iterator[Path]:
    """A new empty dir under `parent` (made if missing; default: the system's temp dir),
    locked until the block ends and then removed with everything in it."""
    root = Path(os.path.abspath(parent if parent is not None else tempfile.gettempdir()))
    root.mkdir(parents=True, exist_ok=True)
    path, lock = _make_locked(root)
    try:
        yield path
    finally:
        try:
            remove(path)
        finally:
            os.close(lock)  # only now: a cleaner must not see it unlocked while it is emptied


def remove_stale(parent: Path) -> list[str]:
    """Removes the scratch dirs under `parent` that nobody holds, pending ones included;
    returns their names. A missing `parent` has none."""
    try:
        entries = [entry for entry in os.scandir(parent) if entry.name.startswith(PREFIX)]
    except FileNotFoundError:
        return []
    removed = []
    for entry in entries:
        lock = _lock(entry.path)
        if lock is None:  # in use (or not a dir of ours)
            continue
        try:
            remove(Path(entry.path))
            removed.append(entry.name)
        finally:
            os.close(lock)
    return removed


def remove(path: Path) -> None:
    """Removes `path` and everything in it, also what the code made unreadable."""
    restore_access(path)
    shutil.rmtree(path, ignore_errors=True)


def _make_locked(root: Path) -> tuple[Path, int]:
    for _ in range(_ATTEMPTS):
        pending = tempfile.mkdtemp(prefix=PREFIX, suffix=PENDING, dir=root)
        lock = _lock(pending)
        if lock is None:  # a cleaner took it first: it removes it
            continue
        final = Path(pending.removesuffix(PENDING))
        try:
            os.rename(pending, final)  # fails only if a live run of another server drew the same name
        except OSError:
            remove(Path(pending))
            os.close(lock)
            continue
        return final, lock
    raise OSError(f"could not make a scratch dir in {root}")


def _lock(path: str) -> int | None:
    """An fd holding an exclusive flock on the dir `path`, or None if another holds one
    (or `path` is gone or no plain dir). The fd is not inherited by child processes."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def restore_access(work: Path) -> None:
    """Gives back what the code may have taken away: the permission to list its dirs."""
    with contextlib.suppress(OSError):
        os.chmod(work, 0o750)
    for top, dirs, _ in os.walk(work):
        for path in (os.path.join(top, name) for name in dirs):
            with contextlib.suppress(OSError):
                if not os.path.islink(path):
                    os.chmod(path, 0o700)

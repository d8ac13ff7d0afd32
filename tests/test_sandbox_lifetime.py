"""What ties a sandbox's life to its server's, without bubblewrap: the launcher that makes the
kernel kill a command with its parent, and scratch dirs that a killed server's successor
removes (never those of a live server sharing the data dir). Real processes, killed for real."""

from __future__ import annotations

import multiprocessing
import os
import shlex
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from tests.processes import alive, cmdline, holder, killed, marked, new_marker, poll, sigkill_all
from tools.sandbox.launch import ORPHANED
from tools.sandbox.process import launched
from tools.sandbox.scratch import PENDING, PREFIX, remove_stale, scratch_dir

FORK = multiprocessing.get_context("fork")  # a parent process without paying for imports again


def test_a_dir_is_held_while_in_use_and_removed_after(tmp_path: Path) -> None:
    with scratch_dir(tmp_path / "sandbox") as work:
        assert work.parent == tmp_path / "sandbox" and work.name.startswith(PREFIX)
        assert not work.name.endswith(PENDING) and list(work.iterdir()) == []
        (work / "sub").mkdir()
        (work / "sub" / "file").write_text("x")
        os.chmod(work / "sub", 0)  # what the code may do to its own dirs
        assert remove_stale(tmp_path / "sandbox") == []  # its owner is alive: it stays
        assert work.is_dir()
    assert list((tmp_path / "sandbox").iterdir()) == []


def test_the_default_parent_is_the_temp_dir(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with scratch_dir() as work:
        assert work.parent == tmp_path


def test_only_the_dirs_of_dead_owners_are_removed(tmp_path: Path) -> None:
    live, live_dir = holder(tmp_path)
    dead, dead_dir = holder(tmp_path)
    try:
        (dead_dir / "left.txt").write_text("by a run its server could not finish")
        killed(dead)
        # A maker killed between creating a dir and locking it leaves it pending.
        pending = Path(tempfile.mkdtemp(prefix=PREFIX, suffix=PENDING, dir=tmp_path))
        (tmp_path / "not-ours").mkdir()
        (tmp_path / f"{PREFIX}file").write_text("a file, not a dir of ours")
        removed = remove_stale(tmp_path)
        assert sorted(removed) == sorted([dead_dir.name, pending.name])
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted([live_dir.name, "not-ours", f"{PREFIX}file"])
        killed(live)
        assert remove_stale(tmp_path) == [live_dir.name]
    finally:
        sigkill_all([p.pid for p in (live, dead) if p.is_alive()])


def test_a_missing_parent_has_nothing_stale(tmp_path: Path) -> None:
    assert remove_stale(tmp_path / "never-made") == []


def _launch(argv: list[str], started) -> None:
    started.send(subprocess.Popen(launched(argv)).pid)
    time.sleep(600)


def test_a_launched_command_dies_with_its_parent() -> None:
    marker = new_marker()
    ours, theirs = FORK.Pipe()
    parent = FORK.Process(target=_launch, args=(["/bin/sleep", marker], theirs), daemon=True)
    parent.start()
    try:
        pid = ours.recv()
        assert poll(lambda: marked(marker) == [pid], 10), "the command did not start"  # launch.py became sleep
        killed(parent)
        assert poll(lambda: marked(marker) == [], 1), "the command outlived its parent"
    finally:
        sigkill_all(marked(marker) + ([parent.pid] if parent.is_alive() else []))


def test_nothing_starts_when_the_parent_is_already_gone() -> None:
    # A small shell starts the launcher in the background and exits at once: long before the
    # launcher's Python is up to set its parent-death signal (the race the launcher closes).
    marker = new_marker()
    *launcher, _our_pid = launched([])
    script = f'{shlex.join(launcher)} "$$" /bin/sleep {marker} & echo $!'
    pid = int(subprocess.run(["/bin/sh", "-c", script], capture_output=True, text=True, timeout=10).stdout)
    try:
        assert poll(lambda: not alive(pid) or marker in cmdline(pid), 10)
        assert not alive(pid) and marked(marker) == [], "a command whose parent had died was started"
    finally:
        sigkill_all(marked(marker))


def test_the_launcher_refuses_a_wrong_parent() -> None:
    not_our_parent = [*launched([])[:-1], "1"]  # the launcher, told its parent is pid 1
    done = subprocess.run([*not_our_parent, "/bin/echo", "started"], capture_output=True, text=True, timeout=10)
    assert done.returncode == ORPHANED and done.stdout == ""
    assert "parent 1 is gone; not starting /bin/echo" in done.stderr

"""This test process's descendants, read from /proc (psutil is not a test dependency):
for tests that check a sandbox leaves no process behind."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import secrets
import signal
import time
from pathlib import Path

from tests import pace


def stat(pid: int) -> list[str] | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def alive(pid: int) -> bool:
    fields = stat(pid)
    return fields is not None and fields[0] not in ("Z", "X")


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def descendants(root: int) -> list[int]:
    parents = {int(p): int(f[1]) for p in os.listdir("/proc") if p.isdigit() and (f := stat(int(p))) and alive(int(p))}
    found, frontier = [], {root}
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier}
        found += sorted(frontier)
    return found


def ours() -> set[int]:
    """This test process's live descendants (a session's server, say, or the sandbox)."""
    return set(descendants(os.getpid()))


async def wait_for_tree(ready, timeout: float = 5) -> list[int]:
    deadline = pace.Deadline(timeout)
    while not deadline.expired():
        if ready(tree := descendants(os.getpid())):
            return tree
        await asyncio.sleep(0.02)
    raise AssertionError(f"the sandbox did not start: {[cmdline(p) for p in descendants(os.getpid())]}")


def marked(marker: str) -> list[int]:
    """Live processes anywhere on the machine whose command line holds `marker`: found also
    when they left this process's tree (reparented after their parent was killed)."""
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and marker in cmdline(int(p)) and alive(int(p))]


def new_marker() -> str:
    """A `sleep` duration no other process uses: `sleep MARKER` is easy to find in /proc."""
    return f"{86_000 + secrets.randbelow(400)}.{secrets.randbelow(10**6):06d}"


def poll(done, timeout: float, interval: float = 0.02) -> bool:
    """Calls `done()` until it is true (True) or `timeout` seconds (scaled by the load) pass (False)."""
    deadline = pace.Deadline(timeout)
    while not done():
        if deadline.expired():
            return False
        time.sleep(interval)
    return True


def sigkill_all(pids) -> None:
    """Cleans up after a failed test: what it was checking must not live on."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _hold(parent: str, made) -> None:
    from tools.sandbox.scratch import scratch_dir

    with scratch_dir(Path(parent)) as path:
        made.send(str(path))
        time.sleep(600)


def holder(parent: Path) -> tuple[multiprocessing.Process, Path]:
    """Another process (a server, say; forked, so without paying for imports again) that made
    a sandbox scratch dir under `parent` and is using it."""
    fork = multiprocessing.get_context("fork")
    ours, theirs = fork.Pipe()
    proc = fork.Process(target=_hold, args=(str(parent), theirs), daemon=True)
    proc.start()
    assert ours.poll(pace.scaled(10)), "the holder did not make its dir"
    return proc, Path(ours.recv())


def killed(proc: multiprocessing.Process) -> None:
    """SIGKILLs a forked process (as a server may be killed) and reaps it."""
    os.kill(proc.pid, signal.SIGKILL)
    proc.join(pace.scaled(5))

"""Every process a test starts lives in a process group of its own and dies with its owner,
whatever way the owner ends: a failed assert, a pytest-timeout, Ctrl-C, or the test worker
itself killed (an xdist worker crash, the OOM killer, `kill -9`).

- `spawn(argv, ...)` is `subprocess.Popen` in a new session (so its own process group: what
  it starts stays in it unless it calls setsid itself), adopted by this process.
- `end(proc)` stops it: SIGTERM to the leader, then, after a bound, SIGKILL to the whole group
  (whatever of the group outlives its leader is an orphan by definition).
- `run(argv, ...)` is `subprocess.run` on `spawn`: a timeout or an error kills the group,
  not only its first process (`npm` or `node` leave children otherwise).
- `adopt(pid)` takes over a group something else started (asyncio, Playwright's Chromium).

Adopted groups are also held by a watchdog: a small process of its own session that this one
feeds over a pipe. When this process is gone (the pipe closes or the watchdog's parent
changes), the watchdog kills every group still registered. `PR_SET_PDEATHSIG` is not used:
it fires when the *thread* that forked exits (a server started from `asyncio.to_thread`
would die with the executor's thread), and it reaches only the direct child, not the group.

The pytest hooks at the end sweep what a test started in its body and left running.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any, Iterator

import pytest

from tests import pace

GRACE = 10.0  # seconds a leader gets to stop on SIGTERM (quiet machine; scaled by the load)

_WATCHDOG = r"""
import os, select, signal, sys, time
parent, groups, pending = int(sys.argv[1]), set(), b""
signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C meant for pytest must not end the guard first
def alive(pgid):
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
while os.getppid() == parent:
    if select.select([0], [], [], 0.5)[0]:
        chunk = os.read(0, 65536)
        if not chunk:
            break
        *lines, pending = (pending + chunk).split(b"\n")
        for line in lines:
            (groups.add if line[:1] == b"+" else groups.discard)(int(line[1:]))
    # An emptied group is forgotten at once, so a later group reusing its number is never hit.
    groups = {g for g in groups if alive(g)}
for sig in (signal.SIGTERM, signal.SIGCONT):
    for g in groups:
        try: os.killpg(g, sig)
        except OSError: pass
deadline = time.monotonic() + float(sys.argv[2])
while any(alive(g) for g in groups) and time.monotonic() < deadline:
    time.sleep(0.05)
for g in groups:
    try: os.killpg(g, signal.SIGKILL)
    except OSError: pass
"""


class _Guard:
    """This process's adopted groups, and the watchdog that outlives it to kill them."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.groups: dict[int, int] = {}  # pgid -> sequence number (when it was adopted)
        self.sequence = 0
        self.owner = os.getpid()
        self.watchdog = subprocess.Popen([sys.executable, "-I", "-S", "-c", _WATCHDOG, str(os.getpid()), "5"],
                                         stdin=subprocess.PIPE, start_new_session=True)
        atexit.register(self.close)

    def tell(self, line: str) -> None:
        try:
            assert self.watchdog.stdin is not None
            self.watchdog.stdin.write(line.encode() + b"\n")
            self.watchdog.stdin.flush()
        except (BrokenPipeError, ValueError):
            pass  # the watchdog is gone: the groups are still ended by `close`

    def adopt(self, pgid: int, lasting: bool = False) -> None:
        with self.lock:
            self.sequence += 1
            self.groups[pgid] = 0 if lasting else self.sequence  # 0: after no mark (see `adopt`)
            self.tell(f"+{pgid}")

    def forget(self, pgid: int) -> None:
        with self.lock:
            if self.groups.pop(pgid, None) is not None:
                self.tell(f"-{pgid}")

    def since(self, mark: int) -> list[int]:
        with self.lock:
            return [pgid for pgid, seq in self.groups.items() if seq > mark]

    def close(self) -> None:
        """At exit: end every group still here, then let the watchdog go."""
        if os.getpid() != self.owner:  # a forked child exiting: the groups are not its own
            return
        with self.lock:
            left = list(self.groups)  # the lasting ones too
        for pgid in left:
            _signal_group(pgid, signal.SIGTERM)
            _signal_group(pgid, signal.SIGCONT)
        deadline = time.monotonic() + 2.0
        while any(members(pgid) for pgid in left) and time.monotonic() < deadline:
            time.sleep(0.02)
        for pgid in left:
            _signal_group(pgid, signal.SIGKILL)
            self.forget(pgid)
        if self.watchdog.stdin:
            self.watchdog.stdin.close()
        try:
            self.watchdog.wait(5)
        except subprocess.TimeoutExpired:
            self.watchdog.kill()


_guard: _Guard | None = None
_guard_lock = threading.Lock()


def guard() -> _Guard:
    """Made on first use (nothing runs at import); remade in a forked child, whose parent's
    watchdog watches another process."""
    global _guard
    with _guard_lock:
        if _guard is None or _guard.owner != os.getpid():
            _guard = _Guard()
        return _guard


def adopt(pgid: int, lasting: bool = False) -> None:
    """Makes this process the owner of process group `pgid` (it must be a group of its own).
    `lasting`: a helper kept across tests (tests/forkserver.py), never swept after the test
    that happened to start it; it ends with this process."""
    guard().adopt(pgid, lasting)


def mark() -> int:
    """A point in time: `left_since(mark)` is what was adopted after it and is still here."""
    return guard().sequence


def left_since(mark: int) -> list[int]:
    return [pgid for pgid in guard().since(mark) if group_alive(pgid)]


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def members(pgid: int) -> list[int]:
    """Live (not zombie) processes of the group, read from /proc."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = open(f"/proc/{entry}/stat").read().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
                found.append(int(entry))
    return found


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def end_group(pgid: int, grace: float = 1.0) -> None:
    """SIGTERM (and SIGCONT, for a stopped one) to the group, SIGKILL after `grace` s."""
    _signal_group(pgid, signal.SIGTERM)
    _signal_group(pgid, signal.SIGCONT)
    deadline = time.monotonic() + grace
    while members(pgid) and time.monotonic() < deadline:
        time.sleep(0.02)
    _signal_group(pgid, signal.SIGKILL)
    guard().forget(pgid)


def spawn(argv: list[str] | tuple[str, ...], **popen: Any) -> subprocess.Popen:
    """`subprocess.Popen` in a process group of its own, owned by this process."""
    proc = subprocess.Popen(argv, start_new_session=True, **popen)
    adopt(proc.pid)
    return proc


def end(proc: subprocess.Popen, grace: float | None = None) -> int:
    """Stops `proc` and whatever it started: SIGTERM to it, SIGKILL to its whole group once it
    has exited or `grace` s (scaled by the load) have passed. Its exit status."""
    if proc.poll() is None:
        for sig in (signal.SIGTERM, signal.SIGCONT):
            try:
                proc.send_signal(sig)
            except ProcessLookupError:
                pass
        try:
            proc.wait(pace.scaled(GRACE if grace is None else grace))
        except subprocess.TimeoutExpired:
            pass
    # What is left of the group has lost its leader: no one else will stop it.
    end_group(proc.pid, grace=0.5)
    return proc.wait()


def run(argv: list[str] | tuple[str, ...], *, timeout: float | None = None, input: str | bytes | None = None,
        capture_output: bool = False, check: bool = False, **popen: Any) -> subprocess.CompletedProcess:
    """`subprocess.run` whose timeout (or any error, Ctrl-C included) kills the whole group."""
    if capture_output:
        popen.setdefault("stdout", subprocess.PIPE)
        popen.setdefault("stderr", subprocess.PIPE)
    if input is not None:
        popen["stdin"] = subprocess.PIPE
    proc = spawn(argv, **popen)
    try:
        out, err = proc.communicate(input, timeout=timeout)
    except BaseException:
        _signal_group(proc.pid, signal.SIGKILL)
        proc.communicate()
        guard().forget(proc.pid)
        raise
    end_group(proc.pid, grace=0.5)  # the leader is done; anything it left behind is not wanted
    done = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    if check:
        done.check_returncode()
    return done


async def spawn_async(*argv: str, **kwargs: Any) -> asyncio.subprocess.Process:
    """`asyncio.create_subprocess_exec` in a process group of its own, owned by this process."""
    proc = await asyncio.create_subprocess_exec(*argv, start_new_session=True, **kwargs)
    adopt(proc.pid)
    return proc


async def end_async(proc: asyncio.subprocess.Process, grace: float | None = None) -> int:
    if proc.returncode is None:
        for sig in (signal.SIGTERM, signal.SIGCONT):
            try:
                proc.send_signal(sig)
            except ProcessLookupError:
                pass
        try:
            await asyncio.wait_for(proc.wait(), pace.scaled(GRACE if grace is None else grace))
        except asyncio.TimeoutError:
            pass
    await asyncio.to_thread(end_group, proc.pid, 0.5)
    return await proc.wait()


# --- pytest: what a test left running is ended after it, and named in its report -----------

_MARK = pytest.StashKey[int]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    item.stash[_MARK] = mark()
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Iterator[None]:
    try:
        return (yield)  # function-scoped fixtures end their own processes first
    finally:
        _sweep(item)


def _sweep(item: pytest.Item) -> None:
    """Processes started in the test's body (not by a fixture, which owns its own) and still
    running once its fixtures are torn down: ended, and named in the test's report."""
    began = item.stash.get(_MARK, None)
    if began is None:
        return
    left = left_since(began)
    if left:
        described = [f"{pgid}: {_cmdline(pgid)}" for pgid in left]
        for pgid in left:
            end_group(pgid, grace=pace.scaled(2.0))
        item.add_report_section("teardown", "processes", "left running by the test, now killed:\n"
                                + "\n".join(described))


def _cmdline(pid: int) -> str:
    try:
        return open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return "?"

"""`python server.py` without loading its modules again for every start.

A server's start costs ~4 s of CPU, nearly all of it imports (the Anthropic SDK alone
defines ~2,000 pydantic classes), and the suite starts a few hundred servers on two cores.
So each test worker keeps one forkserver: a process that has imported `server` once and,
for every start, forks a child that runs `server.main()` exactly as `python server.py`
would: in a session of its own, with the test's environment, arguments, working directory
and log as its stdin/stdout/stderr, ending as the interpreter ends (atexit, threads joined)
or by the signal that stopped it. The child is the real server: its own pid and process
group, the same code, signals and exit status; only the imported modules are shared. The
project's rule that nothing happens at import is what makes this sound.

A start the fork cannot reproduce is a plain `subprocess.Popen`: a `preexec_fn`, or an
environment that changes the interpreter itself (PYTHON*, locale, LD_*), which a fork
would not apply.

Run as `python -m tests.forkserver` (by `ForkServer`): requests and answers are JSON lines
on its stdin and stdout; one process, one thread (a fork copies only the calling thread).
"""

from __future__ import annotations

import json
import os
import queue
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# What the interpreter reads only as it starts: a start that sets any of these differently
# from the forkserver's own environment runs in a fresh interpreter.
_INTERPRETER = ("PYTHON", "LC_", "LANG", "LD_")


# ---- the forkserver process ----------------------------------------------------------------

def _serve() -> None:
    import gc
    gc.disable()  # as server.py loads itself (see there)
    import server  # noqa: F401  (what every child would import)
    gc.enable()
    if threading.active_count() > 1:
        return  # a thread started at import: forking would copy its locks, not it (no `ready`: the worker spawns)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    pending = b""
    _say({"ready": os.getpid()})
    while True:
        readable, _, _ = select.select([0, wake_r], [], [])
        if wake_r in readable:
            os.read(wake_r, 4096)
        _reap()
        if 0 in readable:
            chunk = os.read(0, 65536)
            if not chunk:
                return  # the test worker is gone (its watchdog ends the servers)
            *lines, pending = (pending + chunk).split(b"\n")
            for line in lines:
                _say({"pid": _fork(json.loads(line))})


def _say(message: dict[str, Any]) -> None:
    os.write(1, json.dumps(message).encode() + b"\n")


def _reap() -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        _say({"exit": pid, "code": os.waitstatus_to_exitcode(status)})


def _fork(request: dict[str, Any]) -> int:
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid:
        os.close(ready_w)
        os.read(ready_r, 1)  # it has its own session: the worker may adopt its group
        os.close(ready_r)
        return pid
    # The child. From here on it is `python server.py`; SystemExit and any other exception
    # leave through the interpreter as they would there (nothing on this stack catches them).
    os.setsid()
    os.write(ready_w, b"x")
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    log = os.open(request["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.closerange(3, os.sysconf("SC_OPEN_MAX"))
    sys.stdin = open(0, closefd=False)
    sys.stdout = open(1, "w", closefd=False)
    sys.stderr = open(2, "w", buffering=1, errors="backslashreplace", closefd=False)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = ["server.py", *request["args"]]
    import server
    sys.exit(server.main())


# ---- the test worker's side ----------------------------------------------------------------

class ForkedProcess:
    """The part of `subprocess.Popen` the tests and the reaper use, for a forked server."""

    def __init__(self, forkserver: "ForkServer", pid: int, args: list[str]):
        self._forkserver = forkserver
        self.pid, self.args = pid, args
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._forkserver.exit_code(self.pid, 0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self.returncode = self._forkserver.exit_code(self.pid, timeout)
            if self.returncode is None:
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class ForkServer:
    def __init__(self) -> None:
        from tests import reaper

        self.owner = os.getpid()
        self.env = dict(os.environ)
        # "server.py" in its command line, which its children (the servers) keep: `ps` and
        # the tests that look for servers by command line find them.
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.forkserver", "server.py"], cwd=ROOT, env=self.env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True)
        reaper.adopt(self.proc.pid, lasting=True)
        self._lock = threading.Lock()  # one request at a time
        self._pids: queue.Queue[int | None] = queue.Queue()
        self._exits: dict[int, int] = {}
        self._exited = threading.Condition()
        self._alive = True
        ready: queue.Queue[bool] = queue.Queue()
        threading.Thread(target=self._read, args=(ready,), name="forkserver", daemon=True).start()
        self.ok = ready.get()

    def _read(self, ready: queue.Queue[bool]) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            message = json.loads(line)
            if "ready" in message:
                ready.put(True)
            elif "pid" in message:
                self._pids.put(message["pid"])
            else:
                with self._exited:
                    self._exits[message["exit"]] = message["code"]
                    self._exited.notify_all()
        with self._exited:
            self._alive = False
            self._exited.notify_all()
        ready.put(False)
        self._pids.put(None)

    def fits(self, env: dict[str, str]) -> bool:
        """Whether a start with this environment can be a fork."""
        if not self.ok or not self._alive:
            return False
        names = {n for n in (*env, *self.env) if n.startswith(_INTERPRETER)}
        return all(env.get(n) == self.env.get(n) for n in names)

    def start(self, args: list[str], env: dict[str, str], cwd: Path, log: Path) -> ForkedProcess | None:
        """The server forked, its group adopted; None when the forkserver is gone."""
        from tests import reaper

        with self._lock:
            assert self.proc.stdin is not None
            try:
                self.proc.stdin.write(json.dumps({"args": args, "env": env, "cwd": str(cwd),
                                                  "log": str(log)}).encode() + b"\n")
                self.proc.stdin.flush()
            except (BrokenPipeError, ValueError):
                return None
            pid = self._pids.get()
        if pid is None:
            return None
        reaper.adopt(pid)
        return ForkedProcess(self, pid, [sys.executable, "server.py", *args])

    def exit_code(self, pid: int, timeout: float | None) -> int | None:
        with self._exited:
            self._exited.wait_for(lambda: pid in self._exits or not self._alive, timeout)
            if pid in self._exits:
                return self._exits[pid]
        if self._alive:
            return None
        # The forkserver is gone: its children went to init, which reaps them; the status is lost.
        from tests.processes import alive

        while alive(pid):
            if timeout is not None and timeout <= 0:
                return None
            time.sleep(0.05)
            timeout = None if timeout is None else timeout - 0.05
        return -signal.SIGKILL


_forkserver: ForkServer | None = None
_forkserver_lock = threading.Lock()


def forkserver() -> ForkServer:
    """This process's forkserver, started on first use (remade in a forked child)."""
    global _forkserver
    with _forkserver_lock:
        if _forkserver is None or _forkserver.owner != os.getpid() or _forkserver.proc.poll() is not None:
            _forkserver = ForkServer()
        return _forkserver


if __name__ == "__main__":
    _serve()

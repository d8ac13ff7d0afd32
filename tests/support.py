"""Starting the real server as a user would (`python server.py`) and talking to it."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import websockets

from tests import forkserver, pace, reaper

ROOT = Path(__file__).resolve().parent.parent
START_BOUND = 60.0  # s without an answer, on a quiet machine, before a start that uses no CPU is hung
STOP_BOUND = 30.0  # s a server gets to exit on a signal, on a quiet machine


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class PortTaken(RuntimeError):
    """The server could not bind its port: another process has it."""


def _spawn_server(args: tuple[str, ...], env: dict[str, str], log_path: Path, preexec_fn: Any) -> Any:
    """`python server.py`: a fork of one that has loaded its modules already where it can be
    (tests/forkserver.py; `CHAT_AGENT_TEST_FORK=0` turns that off), else a new process."""
    if os.environ.get("CHAT_AGENT_TEST_FORK", "1") != "0" and preexec_fn is None:
        forks = forkserver.forkserver()
        if forks.fits(env):
            proc = forks.start(list(args), env, ROOT, log_path)
            if proc is not None:
                return proc
    with open(log_path, "ab") as log:
        return reaper.spawn([sys.executable, "server.py", *args], cwd=ROOT, env=env,
                            stdout=log, stderr=subprocess.STDOUT, preexec_fn=preexec_fn)


class _CpuProgress:
    """Whether a process used any CPU in the last `window` s: a start still working is slow,
    not hung."""

    def __init__(self, pid: int, window: float = 10.0):
        self.pid, self.window = pid, window
        self.seen = [(time.monotonic(), self._cpu())]

    def _cpu(self) -> int:
        try:
            fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
            return int(fields[11]) + int(fields[12])  # utime + stime, in clock ticks
        except (OSError, IndexError, ValueError):
            return -1

    def progressed(self) -> bool:
        now, cpu = time.monotonic(), self._cpu()
        self.seen.append((now, cpu))
        while len(self.seen) > 2 and now - self.seen[1][0] >= self.window:
            self.seen.pop(0)  # the oldest sample kept is the last one at least `window` s old
        since, before = self.seen[0]
        return now - since < self.window or cpu > before


class ServerProcess:
    """`python server.py` in a child process, configured only through its environment."""

    def __init__(self, data_dir: Path, env: dict[str, str], args: tuple[str, ...] = ()):
        self.data_dir = data_dir
        self.args = args  # command-line arguments of server.py (`--demo`)
        self.port = free_port()
        self.env = {**os.environ, "CHAT_AGENT_DATA_DIR": str(data_dir), "CHAT_AGENT_PORT": str(self.port),
                    "CHAT_AGENT_HOST": "127.0.0.1", "CHAT_AGENT_LOG_LEVEL": "WARNING", **env}
        self.proc: subprocess.Popen[bytes] | None = None
        self._started: list[subprocess.Popen[bytes]] = []  # each start's process (its group), for `close`
        self._listened = False  # it listened once on `port`: a restart must keep it
        self.log_path = data_dir / "server.log"

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/api/chat-agent"

    def start(self, timeout: float | None = None, preexec_fn: Any = None) -> "ServerProcess":
        """Starts the server and returns once it answers /health. `preexec_fn` runs in the child
        before the server: resource limits, say.

        There is no fixed clock: the wait ends when the server answers, or at once when it
        exits (with its log), or when it has neither answered nor used any CPU for a while
        past `timeout` s (60 by default), scaled by how loaded the machine is: a hung start.
        A healthy start that is merely slow (a busy machine) is never failed."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        for attempt in range(3):
            self.proc = _spawn_server(self.args, self.env, self.log_path, preexec_fn)
            self._started.append(self.proc)
            try:
                self._wait_ready(pace.Deadline(timeout or START_BOUND))
            except PortTaken:
                # Another process took the free port between `free_port` and the server's bind
                # (another test, worker or helper): a first start moves to another one; a
                # restart, whose clients know the port, cannot.
                if self._listened or attempt == 2:
                    raise
                self._move_to(free_port())
                continue
            except BaseException:
                reaper.end(self.proc, grace=2.0)
                raise
            self._listened = True
            return self
        raise AssertionError("unreachable")

    def _move_to(self, port: int) -> None:
        self.port = port
        self.env["CHAT_AGENT_PORT"] = str(port)

    def _wait_ready(self, deadline: pace.Deadline) -> None:
        assert self.proc is not None
        busy = _CpuProgress(self.proc.pid)
        attempt = 1.0
        while True:
            if self.proc.poll() is not None:
                log = self.log()
                if log.rstrip().endswith(f"cannot listen on 127.0.0.1:{self.port}: Address already in use"):
                    raise PortTaken(log)
                raise RuntimeError(f"server exited with {self.proc.returncode} before it listened:\n{log}")
            try:
                with urllib.request.urlopen(self.http_url + "/health", timeout=attempt) as response:
                    if response.status == 200:
                        return
            except (socket.timeout, TimeoutError):
                # It listens (the socket is bound before the app starts) but does not answer
                # yet: ask again, less often, so a slow start is not buried in requests.
                attempt = min(attempt * 2, 5.0)
            except OSError:  # refused: the port is not bound yet
                time.sleep(0.05)
            progressing = busy.progressed()  # sampled all along: it judges the last `window` s
            if deadline.expired() and not progressing:
                raise RuntimeError(f"server did not start: no answer after {deadline.elapsed():.0f} s and no CPU "
                                   f"used in the last {busy.window:.0f} s (load {pace.load():.1f} per CPU):\n"
                                   f"{self.log()}")

    def stop(self, sig: int = signal.SIGTERM, timeout: float | None = None) -> int:
        """Sends `sig` to the server process only (its children are its own business: tests
        check what it does with them) and waits for it to exit; its exit status. What the
        server leaves behind is ended by `close`."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(pace.scaled(timeout or STOP_BOUND))

    def close(self) -> None:
        """Ends every process this server started, on any path: SIGTERM to the server, SIGKILL
        to its whole process group after a bound. Safe to call twice."""
        for proc in self._started:
            reaper.end(proc)
        self._started.clear()

    def __enter__(self) -> "ServerProcess":
        return self if self.proc is not None and self.proc.poll() is None else self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def get(self, path: str, token: str | None = None) -> tuple[int, Any]:
        return self.request("GET", path, token)

    def request(self, method: str, path: str, token: str | None = None, body: Any = None) -> tuple[int, Any]:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.http_url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        if token:
            req.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(req, timeout=pace.scaled(10)) as response:
                body = response.read()
                return response.status, json.loads(body) if body else None
        except urllib.error.HTTPError as exc:
            body = exc.read()
            return exc.code, json.loads(body) if body else None


async def connect(server: ServerProcess, conversation_id: str | None = None, token: str | None = None,
                  **kwargs: Any) -> tuple[Any, dict]:
    """Opens a socket and returns it with its first frame (always `session`)."""
    query = []
    if conversation_id:
        query.append(f"conversationId={conversation_id}")
    if token:
        query.append(f"token={token}")
    url = server.ws_url + ("?" + "&".join(query) if query else "")
    ws = await websockets.connect(url, compression=None, max_size=None, **kwargs)
    first = json.loads(await ws.recv())
    return ws, first


PASSING = ("title", "status")


async def recv(ws: Any, timeout: float = 10.0, skip: tuple[str, ...] = PASSING) -> dict:
    """The next frame, passing over `title` and `status` frames: a background job sends a
    title after the first exchange, and a model slow to answer (a busy machine) brings a
    status, at moments no test should depend on (tests of them ask for them). `timeout` is
    what a quiet machine needs; it is scaled by the load (tests/pace.py)."""
    import asyncio
    while True:
        frame = json.loads(await asyncio.wait_for(ws.recv(), pace.scaled(timeout)))
        if frame.get("type") not in skip:
            return frame


async def until(ws: Any, frame_type: str, timeout: float = 15.0, skip: tuple[str, ...] = PASSING) -> list[dict]:
    """Every frame up to and including the first of `frame_type` (titles and status passed over)."""
    frames = []
    while True:
        frame = await recv(ws, timeout, skip=tuple(t for t in skip if t != frame_type))
        frames.append(frame)
        if frame["type"] == frame_type:
            return frames


async def resumed(ws: Any, after_seq: int, frame_type: str = "done", timeout: float = 15.0,
                  skip: tuple[str, ...] = PASSING) -> list[dict]:
    """What a `resume` from `after_seq` brings, in seq order, up to the first `frame_type`
    and with no seq missing before it. Right after a reconnect, live frames may come before
    the older ones the `session` summed up (docs/protocol.md): a client orders them by seq."""
    import asyncio
    deadline = pace.Deadline(timeout)
    got: dict[int, dict] = {}
    while True:
        end = next((seq for seq, f in sorted(got.items()) if f["type"] == frame_type), None)
        if end is not None and all(seq in got for seq in range(after_seq + 1, end + 1)):
            return [got[seq] for seq in range(after_seq + 1, end + 1) if got[seq]["type"] not in skip]
        assert not deadline.expired(), f"no {frame_type} with every frame before it after {deadline.elapsed():.1f} s"
        frame = json.loads(await asyncio.wait_for(ws.recv(), pace.scaled(timeout)))
        if "seq" in frame:
            assert frame["seq"] not in got, f"seq {frame['seq']} sent twice on one connection"
            got[frame["seq"]] = frame


async def send(ws: Any, **frame: Any) -> None:
    await ws.send(json.dumps(frame))


async def polled(check: Any, timeout: float) -> Any:
    """What `check()` returns once it is truthy, asked every 50 ms; fails after `timeout` s
    (scaled by the load)."""
    import asyncio
    deadline = pace.Deadline(timeout)
    while not (found := check()):
        assert not deadline.expired(), f"timed out after {deadline.elapsed():.1f} s"
        await asyncio.sleep(0.05)
    return found


def text_of(frames: list[dict]) -> str:
    return "".join(f["content"] for f in frames if f["type"] == "content_chunk")

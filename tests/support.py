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

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ServerProcess:
    """`python server.py` in a child process, configured only through its environment."""

    def __init__(self, data_dir: Path, env: dict[str, str], args: tuple[str, ...] = ()):
        self.data_dir = data_dir
        self.args = args  # command-line arguments of server.py (`--demo`)
        self.port = free_port()
        self.env = {**os.environ, "CHAT_AGENT_DATA_DIR": str(data_dir), "CHAT_AGENT_PORT": str(self.port),
                    "CHAT_AGENT_HOST": "127.0.0.1", "CHAT_AGENT_LOG_LEVEL": "WARNING", **env}
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = data_dir / "server.log"

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/api/chat-agent"

    def start(self, timeout: float = 30.0, preexec_fn: Any = None) -> "ServerProcess":
        """`preexec_fn` runs in the child before the server: resource limits, say."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([sys.executable, "server.py", *self.args], cwd=ROOT, env=self.env,
                                     stdout=log, stderr=subprocess.STDOUT, preexec_fn=preexec_fn)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.log()}")
            try:
                with urllib.request.urlopen(self.http_url + "/health", timeout=1) as response:
                    if response.status == 200:
                        return self
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"server did not start:\n{self.log()}")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15.0) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(timeout)

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
            with urllib.request.urlopen(req, timeout=10) as response:
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
    status, at moments no test should depend on (tests of them ask for them)."""
    import asyncio
    while True:
        frame = json.loads(await asyncio.wait_for(ws.recv(), timeout))
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


async def send(ws: Any, **frame: Any) -> None:
    await ws.send(json.dumps(frame))


async def polled(check: Any, timeout: float) -> Any:
    """What `check()` returns once it is truthy, asked every 50 ms; fails after `timeout` s."""
    import asyncio
    deadline = time.monotonic() + timeout
    while not (found := check()):
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)
    return found


def text_of(frames: list[dict]) -> str:
    return "".join(f["content"] for f in frames if f["type"] == "content_chunk")

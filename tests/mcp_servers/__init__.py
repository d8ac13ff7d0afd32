"""Real MCP servers for the tests (demo_server.py), and starting its HTTP flavour."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from tests.support import free_port

DEMO = Path(__file__).parent / "demo_server.py"


class HttpDemo:
    """The demo MCP server over streamable HTTP on loopback, in a process of its own."""

    def __init__(self, record: Path):
        self.port = free_port()
        self.record = record
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def start(self) -> "HttpDemo":
        self.proc = subprocess.Popen([sys.executable, str(DEMO), "http", str(self.port)],
                                     env={**os.environ, "DEMO_MCP_RECORD": str(self.record)},
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return self
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("the HTTP MCP server did not start")

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(5)

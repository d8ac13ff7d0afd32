"""Real MCP servers for the tests (demo_server.py), and starting its HTTP flavour."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from tests import pace, reaper
from tests.support import free_port

DEMO = Path(__file__).parent / "demo_server.py"


class HttpDemo:
    """The demo MCP server over streamable HTTP on loopback, in a process group of its own
    (tests/reaper.py): `with HttpDemo(record) as web:`, or `start()` and `kill()`."""

    def __init__(self, record: Path):
        self.port = free_port()
        self.record = record
        self.log_path = record.with_suffix(".log")  # its stderr
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def start(self) -> "HttpDemo":
        with open(self.log_path, "ab") as log:
            self.proc = reaper.spawn([sys.executable, str(DEMO), "http", str(self.port)],
                                     env={**os.environ, "DEMO_MCP_RECORD": str(self.record)},
                                     stdout=subprocess.DEVNULL, stderr=log)
        deadline = pace.Deadline(30)
        while not deadline.expired():
            if self.proc.poll() is not None:
                raise RuntimeError(f"the HTTP MCP server exited with {self.proc.returncode}: "
                                   f"{self.log_path.read_text(errors='replace')[-2000:]}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return self
            except OSError:
                time.sleep(0.05)
        self.kill()
        raise RuntimeError("the HTTP MCP server did not start")

    def kill(self) -> None:
        """SIGKILL, as a crash would (tests restart it on the same port)."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        reaper.end(self.proc)

    def __enter__(self) -> "HttpDemo":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.kill()

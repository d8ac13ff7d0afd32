"""The part every in-process fake shares: one Starlette app under uvicorn, in a daemon
thread, on a free loopback port.

    class FakeThing(LoopbackServer):
        name = "Thing"
        def routes(self) -> list[Route]: ...

    with FakeThing() as fake:
        fake.base_url   # "http://127.0.0.1:<port>"
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from typing import Self

import uvicorn
from starlette.applications import Starlette
from starlette.routing import Route

START_TIMEOUT = 10.0


class LoopbackServer:
    name = "loopback"  # for the error when it does not start

    def __init__(self) -> None:
        # Set on exit so handlers sleeping through a `delay` wake instead of holding the shutdown.
        self._closing = threading.Event()
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def routes(self) -> list[Route]:
        raise NotImplementedError

    def __enter__(self) -> Self:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)  # proto set: asyncio turns Nagle off only then
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(Starlette(routes=self.routes()), log_level="warning", access_log=False, lifespan="off")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]}, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + START_TIMEOUT
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the fake {self.name} server did not start")
            time.sleep(0.005)
        return self

    def __exit__(self, *exc: object) -> None:
        self._closing.set()
        assert self._server is not None and self._thread is not None
        self._server.should_exit = True
        self._thread.join(timeout=10)

    async def _wait(self, seconds: float) -> None:
        """Sleep in a handler, cut short when the server stops."""
        deadline = time.monotonic() + seconds
        while not self._closing.is_set() and time.monotonic() < deadline:
            await asyncio.sleep(min(0.02, max(0.0, deadline - time.monotonic())))

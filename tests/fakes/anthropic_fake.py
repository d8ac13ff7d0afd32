"""A fake Anthropic Messages API: a real HTTP server on loopback speaking the real wire format.

    with FakeAnthropic() as fake:
        client = anthropic.AsyncAnthropic(base_url=fake.base_url, api_key=fake.api_key)
        fake.enqueue(Reply([Text("Hello"), ToolUse("web_search", {"query": "x"})]))

It validates requests like the real API (400s with its wording; thinking it did not sign,
or signed for other text, included), streams SSE exactly as the real API does, injects
faults per reply, and logs every request. Odd replies the real API sends can be scripted:
`Reply(..., cut=True)` (the output limit strikes in the last block: thinking without a
signature, a tool call without `content_block_stop`), `ToolUse(name, raw_json="{broken")`,
`Reply(..., stop_reason="refusal", stop_details={...})`, and
`stop_reason="model_context_window_exceeded"`; a model silent before its first byte is
`Reply(..., lead_delay=12)` (nothing at all, headers included, for 12 s). The server's
reviewer calls take `fake.verdicts(Verdict(False, 0.3, "…"), Verdict(True, 0.9))` in order. With nothing
scripted it answers from the last user message (see `anthropic_default`).

Standalone: `python -m tests.fakes.anthropic_fake --port 0` prints its base URL and serves.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from types import TracebackType

import uvicorn

from tests.fakes.anthropic_app import FakeBackend, RecordedRequest, Responder, When, build_app
from tests.fakes.anthropic_script import (CitedText, Fault, Item, RedactedThinking, Reply, Text, Thinking, ToolUse,
                                          Verdict, is_review)

__all__ = [
    "CitedText",
    "FakeAnthropic",
    "Fault",
    "RecordedRequest",
    "RedactedThinking",
    "Reply",
    "Text",
    "Thinking",
    "ToolUse",
    "Verdict",
]

START_TIMEOUT = 10.0
TICK = 0.01  # seconds between checks of `should_exit`
GRACE = 2.0  # seconds open responses get to finish when the server stops


class _QuietServer(uvicorn.Server):
    """uvicorn for tests: leaves signals alone and stops in milliseconds, not tenths of seconds."""

    # Signals belong to the test runner (or to `main`), not to an embedded server.
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    async def main_loop(self) -> None:
        counter = 0
        while not await self.on_tick(counter):
            counter = (counter + 1) % 864000
            await asyncio.sleep(TICK)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        # uvicorn's own shutdown sleeps in 100 ms steps; a suite starting a server per test feels that.
        for server in self.servers:
            server.close()
        for connection in list(self.server_state.connections):
            connection.shutdown()
        deadline = time.monotonic() + GRACE
        while (self.server_state.connections or self.server_state.tasks) and time.monotonic() < deadline:
            await asyncio.sleep(TICK / 2)
        for task in self.server_state.tasks:
            task.cancel()
        for server in self.servers:
            await server.wait_closed()


class FakeAnthropic:
    """One fake API server. Thread-based (`with`) or on the caller's loop (`astart`/`astop`)."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, api_key: str = "test-key", *,
                 keep_log: bool = True) -> None:
        """`keep_log=False`: `requests` stays empty. For a fake in a process of its own, whose
        log nobody can read: kept, every request body of a long run is what its garbage
        collector walks through, in pauses that reached a second in a benchmark run."""
        self.host, self.port, self.api_key = host, port, api_key
        self._backend = FakeBackend(keep_log)
        self._server: _QuietServer | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None

    # -- scripting ------------------------------------------------------------------------

    def enqueue(self, *items: Item, when: When | None = None) -> None:
        """Queue replies or faults, used in order; with `when`, only by requests it accepts."""
        self._backend.enqueue(items, when)

    def verdicts(self, *items: Item) -> None:
        """Queue the reviewer's answers (`Verdict(...)`, or a fault), used by reviewer calls
        only, in order; with none queued a review passes."""
        self._backend.enqueue(items, is_review)

    @property
    def responder(self) -> Responder | None:
        return self._backend.responder

    @responder.setter
    def responder(self, responder: Responder | None) -> None:
        self._backend.responder = responder

    @property
    def requests(self) -> list[RecordedRequest]:
        return self._backend.requests

    @property
    def pending(self) -> int:
        """Queued items not yet used."""
        return self._backend.pending

    def clear(self) -> None:
        """Forget queued items and logged requests (the prompt cache and signatures stay)."""
        self._backend.clear()

    def drop_queue(self) -> None:
        """Forget queued items only: what one test queued and never used (its server was
        killed mid-turn, say) must not answer the next test's calls."""
        self._backend.drop_queue()

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    # -- lifecycle -------------------------------------------------------------------------

    def _prepare(self) -> socket.socket:
        if self._server is not None:
            raise RuntimeError("FakeAnthropic is already running")
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)  # proto set: asyncio turns Nagle off only then
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self.port))
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(
            build_app(self._backend),
            log_level="warning",
            access_log=False,
            lifespan="off",
            ws="none",
        )
        self._server = _QuietServer(config)
        return sock

    def start(self) -> FakeAnthropic:
        sock = self._prepare()
        self._thread = threading.Thread(target=self._run, args=(sock,), name="anthropic-fake", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + START_TIMEOUT
        while not self._started():
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("FakeAnthropic did not start")
            time.sleep(0.005)
        return self

    def _run(self, sock: socket.socket) -> None:
        asyncio.run(self._serve(sock))

    async def _serve(self, sock: socket.socket) -> None:
        self._loop = asyncio.get_running_loop()
        assert self._server is not None
        await self._server.serve(sockets=[sock])

    def _started(self) -> bool:
        return self._server is not None and self._server.started

    def stop(self) -> None:
        if self._server is None or self._thread is None:
            return
        if self._loop is not None and self._loop.is_running():
            self._loop.call_soon_threadsafe(self._end_open_responses)
        self._server.should_exit = True
        self._thread.join(START_TIMEOUT)
        self._server = self._thread = self._loop = None

    def _end_open_responses(self) -> None:
        # Hanging streams would otherwise hold the shutdown until their clients give up.
        for scope in list(self._backend.live):
            scope.cancel()

    async def astart(self) -> FakeAnthropic:
        """Serve on the running event loop instead of a thread."""
        sock = self._prepare()
        assert self._server is not None
        self._task = asyncio.create_task(self._server.serve(sockets=[sock]))
        deadline = time.monotonic() + START_TIMEOUT
        while not self._started():
            if self._task.done() or time.monotonic() > deadline:
                raise RuntimeError("FakeAnthropic did not start")
            await asyncio.sleep(0.005)
        return self

    async def astop(self) -> None:
        if self._server is None or self._task is None:
            return
        self._end_open_responses()
        self._server.should_exit = True
        await self._task
        self._server = self._task = None

    def __enter__(self) -> FakeAnthropic:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    async def __aenter__(self) -> FakeAnthropic:
        return await self.astart()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.astop()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Serve a fake Anthropic Messages API until killed.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    args = parser.parse_args(argv)
    fake = FakeAnthropic(args.host, args.port, keep_log=False).start()
    print(fake.base_url, flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        fake.stop()


if __name__ == "__main__":
    main()

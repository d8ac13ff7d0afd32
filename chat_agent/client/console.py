"""The terminal side of the CLI: writing output pieces, reading lines, routing Ctrl-C."""

from __future__ import annotations

import asyncio
import queue
import signal
import threading
from dataclasses import dataclass
from typing import IO, Callable, Iterable

from .render import Out


@dataclass
class Output:
    """Where rendered pieces go: the reply to `reply`, everything else to `info`."""

    reply: IO[str]
    info: IO[str]

    def write(self, pieces: Iterable[Out]) -> None:
        touched: list[IO[str]] = []
        for piece in pieces:
            stream = self.reply if piece.reply else self.info
            stream.write(piece.text)
            if stream not in touched:
                touched.append(stream)
        for stream in touched:
            stream.flush()


_Request = tuple[str, "asyncio.Future[str | None]", asyncio.AbstractEventLoop]


class LineReader:
    """input() on a daemon thread, one line per `read()`.

    The event loop keeps receiving while the user types, and a thread blocked in input()
    does not hold up the exit after Ctrl-C (a thread of asyncio's default pool would: the
    pool is joined at shutdown).
    """

    def __init__(self) -> None:
        self._requests: queue.SimpleQueue[_Request] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._pending: asyncio.Future[str | None] | None = None

    async def read(self, prompt: str) -> str | None:
        """The next line, or None at end of input (Ctrl-D) or after `cancel()`."""
        loop = asyncio.get_running_loop()
        if self._thread is None:
            self._thread = threading.Thread(target=self._serve, name="chat-agent-input", daemon=True)
            self._thread.start()
        self._pending = loop.create_future()
        self._requests.put((prompt, self._pending, loop))
        try:
            return await self._pending
        finally:
            self._pending = None

    def cancel(self) -> None:
        if self._pending is not None and not self._pending.done():
            self._pending.set_result(None)

    def _serve(self) -> None:
        while True:
            prompt, future, loop = self._requests.get()
            try:
                line: str | None = input(prompt)
            except (EOFError, OSError, ValueError):  # end of input, or stdin closed under us
                line = None
            loop.call_soon_threadsafe(_resolve, future, line)


def _resolve(future: asyncio.Future[str | None], line: str | None) -> None:
    if not future.done():  # a cancelled read may still get its line later: drop it
        future.set_result(line)


class SigintRouter:
    """Ctrl-C calls whatever `handler` the CLI set for the moment (abort a turn, leave the
    prompt) instead of raising KeyboardInterrupt somewhere in the event loop."""

    def __init__(self) -> None:
        self.handler: Callable[[], None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def __enter__(self) -> SigintRouter:
        loop = asyncio.get_running_loop()
        try:
            loop.add_signal_handler(signal.SIGINT, self._fire)
            self._loop = loop
        except (NotImplementedError, RuntimeError):  # Windows, or not the main thread
            pass
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._loop is not None:
            self._loop.remove_signal_handler(signal.SIGINT)
            self._loop = None

    def _fire(self) -> None:
        if self.handler is not None:
            self.handler()

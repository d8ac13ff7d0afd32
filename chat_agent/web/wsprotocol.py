"""uvicorn's WebSocket protocol (websockets' sans-I/O one), lighter on each open socket.

An idle socket is mostly bookkeeping, and at thousands of sockets the bookkeeping is the
server's memory: uvicorn gives each an asyncio.Queue (three deques, ~2.3 KiB) for the
frames it read, an asyncio.Event (a deque of waiters, ~0.8 KiB) for its write buffer, and
keeps the handshake's request and response (~2 KiB of parsed headers) after they are done.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any

from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

from chat_agent.urgency import LONGEST_PAUSE, Urgency

URGENCY = "urgency"  # the app's Urgency, in the lifespan's state (which uvicorn hands each protocol)
ABORT_GLANCE = 256  # characters: frames longer than this are not looked at


def _is_abort(item: Any) -> bool:
    # A glance, not a parse: an `abort` frame is a few bytes; a message that merely says
    # "abort" holds the streams up only until it is read.
    text = item.get("text") if isinstance(item, dict) else None
    return text is not None and len(text) <= ABORT_GLANCE and '"abort"' in text


class _Inbox:
    """What uvicorn uses of asyncio.Queue (`put_nowait`, `get`, `empty`), for its one reader
    (the app's `receive`), holding nothing while empty.

    An `abort` counts as urgent work (chat_agent/urgency.py) from the moment it is read off
    the network: the socket's task that acts on it runs one pass of a busy event loop later,
    behind every stream that is ready, unless they pause meanwhile. The hold ends when the
    frame is taken (the hub then holds its own), or after LONGEST_PAUSE if it never is."""

    __slots__ = ("_items", "_waiter", "_urgency", "_held")

    def __init__(self, urgency: Urgency | None = None) -> None:
        self._items: deque[Any] | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._urgency = urgency
        self._held: asyncio.TimerHandle | None = None  # ends the hold if the frame is never taken

    def put_nowait(self, item: Any) -> None:
        if self._items is None:
            self._items = deque()
        self._items.append(item)
        if self._urgency is not None and self._held is None and _is_abort(item):
            self._urgency.begin(stop=True)
            self._held = asyncio.get_running_loop().call_later(LONGEST_PAUSE, self._release)
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _release(self) -> None:
        if self._held is not None:
            self._held.cancel()
            self._held = None
            self._urgency.end(stop=True)  # type: ignore[union-attr]

    def empty(self) -> bool:
        return not self._items

    async def get(self) -> Any:
        while not self._items:
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        item = self._items.popleft()
        if not self._items:
            self._items = None
        if self._held is not None and _is_abort(item):
            self._release()
        return item


class _Gate:
    """What uvicorn uses of asyncio.Event (`set`, `clear`, `is_set`, `wait`), for the socket's
    write buffer; its waiters (the app's sends while the buffer is full) only while there are."""

    __slots__ = ("_open", "_waiters")

    def __init__(self) -> None:
        self._open = True
        self._waiters: list[asyncio.Future[None]] | None = None

    def is_set(self) -> bool:
        return self._open

    def set(self) -> None:
        self._open = True
        waiters, self._waiters = self._waiters, None
        for waiter in waiters or ():
            if not waiter.done():
                waiter.set_result(None)

    def clear(self) -> None:
        self._open = False

    async def wait(self) -> None:
        if self._open:
            return
        waiter = asyncio.get_running_loop().create_future()
        if self._waiters is None:
            self._waiters = []
        self._waiters.append(waiter)
        await waiter


class LeanWebSocketProtocol(WebSocketsSansIOProtocol):
    """The same protocol, with a lighter queue and write gate, and the handshake dropped once
    answered (read only until the response is sent; the app reads headers from its scope)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.queue = _Inbox(self.app_state.get(URGENCY))  # type: ignore[assignment]
        self.writable = _Gate()  # type: ignore[assignment]

    def start_keepalive(self) -> None:  # called once the handshake response went out
        super().start_keepalive()
        self.request = None  # type: ignore[assignment]
        self.response = None  # type: ignore[assignment]

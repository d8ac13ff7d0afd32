"""A listener on a conversation for an HTTP stream (like a socket): its committed frames, in
seq order, queued until the stream reads them; and the wait for the next one or for the end
of a message's preparation, whichever comes first (a refusal ends the stream)."""

from __future__ import annotations

import asyncio

GONE = object()  # the conversation went away under the stream (deleted, or its instance stopped)
Item = tuple[int | None, str]


class FrameQueue:
    def __init__(self) -> None:
        self.queue: asyncio.Queue[Item | object] = asyncio.Queue()

    def deliver(self, seq: int | None, text: str) -> None:
        self.queue.put_nowait((seq, text))

    def close(self, code: int, text: str | None = None) -> None:
        self.queue.put_nowait(GONE)

    async def next(self, preparing: asyncio.Future[object] | None = None) -> Item | object:
        """The next frame (or GONE), or `preparing` once it ended first."""
        if preparing is None or not self.queue.empty():
            return await self.queue.get()
        getting = asyncio.ensure_future(self.queue.get())
        try:
            done, _ = await asyncio.wait([getting, preparing], return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not getting.done():
                getting.cancel()
        return getting.result() if getting in done else preparing

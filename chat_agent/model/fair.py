"""A stream's fair share of the event loop.

With data already buffered, an SDK's stream never awaits anything real: a fast stream would
hold the event loop (every other client's stream, and `abort`) for as long as it lasts.
"""

from __future__ import annotations

import asyncio

SLICE = 0.005  # seconds one stream may run before letting other tasks in


class FairShare:
    """Call `take_turns()` after each item of a stream: it lets other tasks in once the
    stream has run for SLICE seconds since it last did."""

    __slots__ = ("_loop", "_pause_at")

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._pause_at = self._loop.time() + SLICE

    async def take_turns(self) -> None:
        if self._loop.time() >= self._pause_at:
            await asyncio.sleep(0)
            self._pause_at = self._loop.time() + SLICE

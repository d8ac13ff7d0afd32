"""A stream's fair share of the event loop.

With data already buffered, an SDK's stream never awaits anything real: a fast stream would
hold the event loop (every other client's stream, and `abort`) for as long as it lasts.
"""

from __future__ import annotations

import asyncio

# Seconds one stream may run before letting other tasks in. Every stream ready in a pass of
# the loop takes its slice before the loop reads its sockets again, so a pass lasts up to the
# slice times the streams ready: with 5 ms, 30-100 of them made passes of 140-210 ms with 50
# sessions in bursts, and an `abort` (or a ping) read off its socket only after such a pass
# (ping p99 130-200 ms, abort p95 110-135 ms). With 1 ms, no pass of that kind, abort p95
# 80-92 ms, for ~5% more of the server's CPU in bursts (more steps per stream).
SLICE = 0.001


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

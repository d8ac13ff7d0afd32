"""Work a client is waiting for right now goes ahead of streaming.

The event loop runs whatever is ready in arrival order. When replies arrive in bursts,
dozens of model streams are ready at once, each taking its share of the loop (a few ms,
`model/fair.py`) before the next task runs. Every await on an abort's way to its `done`
(the turn unwinding, the commit, the socket's write) then waits behind all of them once:
measured with 50 sessions streaming bursts, 150-400 ms at p95. While urgent work is under
way, the streams pause between two items instead (`agent/waiting.py`), so that its steps
meet a short queue; so do the store's bulk commits (`store/writer.py`), and an `abort` counts
as urgent from the moment it is read off its socket (`web/wsprotocol.py`). The same holds,
for the same reason, while a turn's first text is on its way: from the moment its stream has
it until the turn takes it, and while the writer has urgent writes (a first text, a `done`)
waiting for their commit (`Hold`). A model call about to start waits for aborts only
(`stop=True`): held back for the other turns' first texts too, the requests of 200 turns
started at once went out up to 230 ms later at the median, and each of those turns' first
text with them. A pause is bounded (`LONGEST_PAUSE`): urgent work that takes long (a tool
given its moment to kill what it started) holds every reply up only that long.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager

LONGEST_PAUSE = 0.1  # seconds a stream waits for urgent work at most, each time it pauses


class Urgency:
    """Counts the urgent work under way in this process; `pause` is where streams wait for it.
    Stops (an abort on its way to its `done`) are also counted apart: a model call about to
    start waits for those only (`pause_for_stops`)."""

    __slots__ = ("_under_way", "_stops", "_over", "_stops_over", "_longest")

    def __init__(self, longest: float = LONGEST_PAUSE) -> None:
        self._under_way = 0
        self._stops = 0
        self._over: asyncio.Future[None] | None = None  # what paused streams wait for
        self._stops_over: asyncio.Future[None] | None = None  # what calls about to start wait for
        self._longest = longest

    @property
    def pending(self) -> bool:
        return self._under_way > 0

    @property
    def stopping(self) -> bool:
        return self._stops > 0

    @contextmanager
    def first(self, *, stop: bool = False) -> Iterator[None]:
        """Streams pause while the block runs (and calls about to start, for a `stop`)."""
        self.begin(stop=stop)
        try:
            yield
        finally:
            self.end(stop=stop)

    def begin(self, *, stop: bool = False) -> None:
        """Urgent work starts; `end` says it is over (`first`, for work that starts in one
        place and ends in another)."""
        self._under_way += 1
        if stop:
            self._stops += 1

    def end(self, *, stop: bool = False) -> None:
        if stop:
            self._stops -= 1
            if not self._stops:
                self._stops_over = _resolved(self._stops_over)
        self._under_way -= 1
        if not self._under_way:
            self._over = _resolved(self._over)

    async def pause(self, interrupt: asyncio.Future[None] | None = None) -> None:
        """Returns once no urgent work is under way, or after the longest pause, or once
        `interrupt` is done (urgent work of the pausing party's own has come)."""
        if not self._under_way:
            return
        if self._over is None:
            self._over = asyncio.get_running_loop().create_future()
        await asyncio.wait([self._over] if interrupt is None else [self._over, interrupt], timeout=self._longest,
                           return_when=asyncio.FIRST_COMPLETED)

    async def pause_for_stops(self) -> None:
        """Returns once no stop is under way, or after the longest pause. What a model call
        about to start waits for: other urgent work (a first text, a `done` on its way to
        its commit) would hold back the request of a turn whose own first text is further
        off than theirs, the longer the more turns start at once (200 at once: posting went
        from ~120 to 170-370 ms after the message at the median)."""
        if not self._stops:
            return
        if self._stops_over is None:
            self._stops_over = asyncio.get_running_loop().create_future()
        await asyncio.wait([self._stops_over], timeout=self._longest)


def _resolved(future: asyncio.Future[None] | None) -> None:
    """Lets whoever waits on `future` go; the next wait makes a new one."""
    if future is not None and not future.done():
        future.set_result(None)
    return None


class Hold:
    """Urgent work of one party that starts in one place and ends in another (`take`, then
    `release`), counted once however often either is called; with no `Urgency`, nothing."""

    __slots__ = ("_urgency", "held")

    def __init__(self, urgency: Urgency | None) -> None:
        self._urgency = urgency
        self.held = False

    def take(self) -> None:
        if self._urgency is not None and not self.held:
            self.held = True
            self._urgency.begin()

    def release(self) -> None:
        if self.held:
            self.held = False
            self._urgency.end()  # type: ignore[union-attr]

"""Work a client is waiting for right now goes ahead of streaming.

The event loop runs whatever is ready in arrival order. When replies arrive in bursts,
dozens of model streams are ready at once, each taking its share of the loop (a few ms,
`model/fair.py`) before the next task runs. Every await on an abort's way to its `done`
(the turn unwinding, the commit, the socket's write) then waits behind all of them once:
measured with 50 sessions streaming bursts, 150-400 ms at p95. While urgent work is under
way, the streams pause between two items instead (`agent/waiting.py`), so that its steps
meet a short queue, and an `abort` counts as urgent from the moment it is read off its socket
(`web/wsprotocol.py`). The same holds, for the same reason, while a turn's first text is on
its way: from the moment its stream has it until the turn takes it, and while the writer has
urgent writes (a first text, a `done`) waiting for their commit (`Hold`). A model call about
to start, and the store's bulk commits (`store/writer.py`), wait for aborts only
(`stop=True`): held back for the other turns' first texts too, the requests of 200 turns
started at once went out up to 230 ms later at the median, and each of those turns' first
text with them; bulk commits held back that way held up the first texts' own commits. A
pause is bounded (`LONGEST_PAUSE`): urgent work that takes long (a tool given its moment to
kill what it started) holds every reply up only that long.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager

LONGEST_PAUSE = 0.1  # seconds a stream waits for urgent work at most, each time it pauses


class _Count:
    """Work under way of one kind, and what waits for it to be over."""

    __slots__ = ("n", "_over")

    def __init__(self) -> None:
        self.n = 0
        self._over: asyncio.Future[None] | None = None  # what those waiting wait on

    def add(self, k: int) -> None:
        self.n += k
        if not self.n and self._over is not None:
            if not self._over.done():
                self._over.set_result(None)
            self._over = None

    async def over(self, longest: float, interrupt: asyncio.Future[None] | None = None) -> None:
        if not self.n:
            return
        if self._over is None:
            self._over = asyncio.get_running_loop().create_future()
        await asyncio.wait([self._over] if interrupt is None else [self._over, interrupt], timeout=longest,
                           return_when=asyncio.FIRST_COMPLETED)


class Urgency:
    """Counts the urgent work under way in this process; `pause` is where streams wait for it.
    Stops (an abort on its way to its `done`) are also counted apart: a model call about to
    start waits for those only (`pause_for_stops`)."""

    __slots__ = ("_all", "_stops", "_longest")

    def __init__(self, longest: float = LONGEST_PAUSE) -> None:
        self._all = _Count()
        self._stops = _Count()
        self._longest = longest

    @property
    def pending(self) -> bool:
        return self._all.n > 0

    @property
    def stopping(self) -> bool:
        return self._stops.n > 0

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
        self._all.add(1)
        if stop:
            self._stops.add(1)

    def end(self, *, stop: bool = False) -> None:
        if stop:
            self._stops.add(-1)
        self._all.add(-1)

    async def pause(self, interrupt: asyncio.Future[None] | None = None) -> None:
        """Returns once no urgent work is under way, or after the longest pause, or once
        `interrupt` is done (urgent work of the pausing party's own has come)."""
        await self._all.over(self._longest, interrupt)

    async def pause_for_stops(self, interrupt: asyncio.Future[None] | None = None) -> None:
        """Returns once no stop is under way, or after the longest pause, or once `interrupt`
        is done: what a model call about to start waits for (see the module's doc), and the
        store's bulk writes."""
        await self._stops.over(self._longest, interrupt)


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

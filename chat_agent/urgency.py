"""Work a client is waiting for right now goes ahead of streaming.

The event loop runs whatever is ready in arrival order. When replies arrive in bursts,
dozens of model streams are ready at once, each taking its share of the loop (a few ms,
`model/fair.py`) before the next task runs. Every await on an abort's way to its `done`
(the turn unwinding, the commit, the socket's write) then waits behind all of them once:
measured with 50 sessions streaming bursts, 150-400 ms at p95. While urgent work is under
way, the streams pause between two items instead (`agent/waiting.py`), so that its steps
meet a short queue; so do the store's bulk commits (`store/writer.py`) and model calls about
to start, and an `abort` counts as urgent from the moment it is read off its socket
(`web/wsprotocol.py`). The same holds, for the same reason, while a turn's first text is on
its way: from the moment its stream has it until the turn takes it, and while the writer
has urgent writes (a first text, a `done`) waiting for their commit (`Hold`). A pause is
bounded (`LONGEST_PAUSE`): urgent work that takes long (a tool given its moment to kill what
it started) holds every reply up only that long.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager

LONGEST_PAUSE = 0.1  # seconds a stream waits for urgent work at most, each time it pauses


class Urgency:
    """Counts the urgent work under way in this process; `pause` is where streams wait for it."""

    __slots__ = ("_under_way", "_over", "_longest")

    def __init__(self, longest: float = LONGEST_PAUSE) -> None:
        self._under_way = 0
        self._over: asyncio.Future[None] | None = None  # what paused streams wait for
        self._longest = longest

    @property
    def pending(self) -> bool:
        return self._under_way > 0

    @contextmanager
    def first(self) -> Iterator[None]:
        """Streams pause while the block runs."""
        self.begin()
        try:
            yield
        finally:
            self.end()

    def begin(self) -> None:
        """Urgent work starts; `end` says it is over (`first`, for work that starts in one
        place and ends in another)."""
        self._under_way += 1

    def end(self) -> None:
        self._under_way -= 1
        if not self._under_way and self._over is not None:
            if not self._over.done():
                self._over.set_result(None)
            self._over = None

    async def pause(self, interrupt: asyncio.Future[None] | None = None) -> None:
        """Returns once no urgent work is under way, or after the longest pause, or once
        `interrupt` is done (urgent work of the pausing party's own has come)."""
        if not self._under_way:
            return
        if self._over is None:
            self._over = asyncio.get_running_loop().create_future()
        await asyncio.wait([self._over] if interrupt is None else [self._over, interrupt], timeout=self._longest,
                           return_when=asyncio.FIRST_COMPLETED)


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

"""Where quotas are counted: the interface every backend answers, and the one in memory.

Two kinds of count, each atomic in its backend so that instances sharing it never both take
the last unit:
- a rate (`take`) is GCRA's single number per user and name, `tat`, the time at which the
  user's bucket is empty again: taking `amount` of a `rate` (units per `period` s) moves it
  to max(tat, now) + amount·period/rate, refused when that lies more than `period` ahead. A
  user may spend the whole quota at once, then one unit per period/rate seconds: no window
  edge where twice the quota passes. `now` is read while the bucket is locked (or by the
  backend's own server): a clock read before waiting for the lock could arrive after a later
  one, and an older `now` judges a full bucket as over the limit.
- a hold (`hold`) is a row that lasts until released or expired (an open socket), counted
  while it lasts; its instance renews it, so an instance that died holds nothing for long.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol


@dataclass(frozen=True, slots=True)
class Taken:
    """The outcome of `take`: whether it was granted, the bucket's `tat` after it (as it
    stands when refused), and the `now` it was judged at."""
    granted: bool
    tat: float
    now: float


@dataclass(frozen=True, slots=True)
class Hold:
    owner: str
    name: str
    id: str


class Counters(Protocol):
    kind: str

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    async def take(self, owner: str, name: str, amount: float, rate: int, period: float,
                   clock: Callable[[], float]) -> Taken:
        """Takes `amount` units if the bucket allows it (see the module's doc); `clock` is read
        once the bucket is this call's alone."""

    async def tat(self, owner: str, name: str) -> float | None:
        """The bucket's `tat`, None when the user never took any."""

    async def hold(self, hold: Hold, limit: int, now: float, expires_at: float) -> bool:
        """Adds the hold if fewer than `limit` of the user's holds of that name last at `now`."""

    async def renew(self, holds: list[Hold], expires_at: float) -> None: ...

    async def release(self, hold: Hold) -> None: ...

    async def held(self, owner: str, name: str, now: float) -> int: ...

    async def sweep(self, now: float) -> None:
        """Forgets what no longer counts: expired holds, buckets already empty."""


def gcra(tat: float | None, amount: float, rate: int, period: float, now: float) -> tuple[bool, float]:
    """(granted, the new tat) for one `take` on a bucket at `tat`."""
    new = max(tat or now, now) + amount * period / rate
    if new - now > period + 1e-9:
        return False, tat if tat is not None else now
    return True, new


class MemoryCounters:
    """For one process with nothing shared (an in-memory store): plain dicts, the event loop
    being the only writer."""

    kind = "memory"

    def __init__(self) -> None:
        self._tats: dict[tuple[str, str], float] = {}
        self._holds: dict[str, tuple[Hold, float]] = {}

    async def start(self) -> None:
        pass

    async def close(self) -> None:
        pass

    async def take(self, owner: str, name: str, amount: float, rate: int, period: float,
                   clock: Callable[[], float]) -> Taken:
        now = clock()
        granted, tat = gcra(self._tats.get((owner, name)), amount, rate, period, now)
        if granted:
            self._tats[(owner, name)] = tat
        return Taken(granted, tat, now)

    async def tat(self, owner: str, name: str) -> float | None:
        return self._tats.get((owner, name))

    async def hold(self, hold: Hold, limit: int, now: float, expires_at: float) -> bool:
        if await self.held(hold.owner, hold.name, now) >= limit:
            return False
        self._holds[hold.id] = (hold, expires_at)
        return True

    async def renew(self, holds: list[Hold], expires_at: float) -> None:
        for hold in holds:
            if hold.id in self._holds:
                self._holds[hold.id] = (hold, expires_at)

    async def release(self, hold: Hold) -> None:
        self._holds.pop(hold.id, None)

    async def held(self, owner: str, name: str, now: float) -> int:
        return sum(1 for h, expires in self._holds.values() if h.owner == owner and h.name == name and expires > now)

    async def sweep(self, now: float) -> None:
        self._holds = {k: v for k, v in self._holds.items() if v[1] > now}
        self._tats = {k: v for k, v in self._tats.items() if v > now}

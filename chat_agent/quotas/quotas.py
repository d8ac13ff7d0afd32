"""Per-user quotas (PROTOCOL 1.2 "Quotas", `CHAT_AGENT_LIMITS`), checked where a user starts
something: a socket, a turn, an upload. Counted where every instance sees it (`counters`:
the store's database, or Redis when configured); tokens are read from the turns the store
keeps, so nothing has to be told when a turn ends.

Rates (turns and uploads per minute, upload bytes per day) are token buckets (GCRA, see
counters.py): the whole quota may be spent at once, then it comes back steadily. Tokens per
day are counted per calendar day (UTC), from the turns that ended that day: a turn under way
when the budget runs out finishes, the next one is refused. Sockets and concurrent turns are
counted while they last.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
import uuid
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any, Callable

from chat_agent.config import Limits
from chat_agent.quotas.counters import Counters, Hold
from chat_agent.store import Store

log = logging.getLogger(__name__)

MINUTE, DAY = 60.0, 86_400.0
HOLD_SECONDS = 60.0  # a socket's hold lasts this long unless renewed: an instance's death frees it
RENEW_EVERY = HOLD_SECONDS / 4
SWEEP_EVERY = 600.0
BUSY_RETRY = 5.0  # seconds suggested to a user at their socket or concurrent-turn limit
_RATES = {"turns_per_minute": MINUTE, "uploads_per_minute": MINUTE, "upload_bytes_per_day": DAY}


def camel(name: str) -> str:
    first, *rest = name.split("_")
    return first + "".join(word.title() for word in rest)


class QuotaExceeded(Exception):
    """A limit was reached: `retry_after` seconds until the action may succeed again."""

    def __init__(self, name: str, limit: int, retry_after: float, message: str) -> None:
        super().__init__(message)
        self.name = name
        self.limit = limit
        self.retry_after = max(1, math.ceil(retry_after))
        self.message = message


@dataclass(slots=True)
class SocketHold:
    hold: Hold | None  # None: sockets are not limited, nothing is held


class Quotas:
    def __init__(self, limits: Limits, counters: Counters, store: Store,
                 clock: Callable[[], float] = time.time) -> None:
        self.limits = limits
        self.counters = counters
        self.store = store
        self._clock = clock
        self._holds: dict[str, Hold] = {}  # this instance's, renewed while they last
        self._tasks: list[asyncio.Task[None]] = []

    @property
    def enabled(self) -> bool:
        return any(value is not None for _, value in self.limits.items())

    async def start(self) -> None:
        await self.counters.start()
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._every(RENEW_EVERY, self._renew), name="quota-renew"),
                       loop.create_task(self._every(SWEEP_EVERY, self._sweep), name="quota-sweep")]

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        async with AsyncExitStack() as stack:
            stack.push_async_callback(self.counters.close)
            for hold in list(self._holds.values()):  # ours end with us; others' instances renew theirs
                await self.counters.release(hold)
            self._holds.clear()

    # ---- what users start ----------------------------------------------------------------------

    async def open_socket(self, owner: str) -> SocketHold:
        limit = self.limits.sockets
        if limit is None:
            return SocketHold(None)
        now = self._clock()
        hold = Hold(owner, "sockets", uuid.uuid4().hex)
        if not await self.counters.hold(hold, limit, now, now + HOLD_SECONDS):
            raise QuotaExceeded("sockets", limit, BUSY_RETRY,
                                f"You have {limit} connections open, the most allowed; close one and try again.")
        self._holds[hold.id] = hold
        return SocketHold(hold)

    async def close_socket(self, held: SocketHold) -> None:
        if held.hold is not None and self._holds.pop(held.hold.id, None) is not None:
            try:
                await self.counters.release(held.hold)
            except Exception:  # it expires on its own within HOLD_SECONDS
                log.warning("could not release a socket's quota hold; it expires by itself", exc_info=True)

    async def start_turn(self, owner: str) -> None:
        """Raises QuotaExceeded when the user may not start a turn now. Reads come first, so a
        turn refused for its tokens does not use up one of the minute's turns."""
        limits, now = self.limits, self._clock()
        if limits.tokens_per_day is not None:
            day = now - now % DAY
            used = await self.store.tokens_since(owner, day)
            if used >= limits.tokens_per_day:
                raise QuotaExceeded("tokens_per_day", limits.tokens_per_day, day + DAY - now,
                                    f"You have used your {limits.tokens_per_day:,} model tokens for today "
                                    f"({used:,}); the budget renews at midnight UTC.")
        if limits.concurrent_turns is not None:
            running = await self.store.running_turn_count(owner)
            if running >= limits.concurrent_turns:
                raise QuotaExceeded("concurrent_turns", limits.concurrent_turns, BUSY_RETRY,
                                    f"You have {running} replies running, the most allowed at once; wait for "
                                    "one to finish.")
        await self._take(owner, "turns_per_minute", 1, "turns a minute")

    async def upload(self, owner: str, size: int | None) -> None:
        """Before an upload is read (`size`: None) it counts against uploads per minute; once its
        size is known, against the bytes of the day."""
        if size is None:
            await self._take(owner, "uploads_per_minute", 1, "uploads a minute")
        elif size > 0:
            await self._take(owner, "upload_bytes_per_day", size, "bytes of uploads a day")

    async def _take(self, owner: str, name: str, amount: int, unit: str) -> None:
        rate = getattr(self.limits, name)
        if rate is None:
            return
        period = _RATES[name]
        taken = await self.counters.take(owner, name, amount, rate, period, self._clock)
        if not taken.granted:
            # Room for `amount` comes back once the bucket has drained to period - step.
            wait = taken.tat + min(amount * period / rate, period) - period - taken.now
            if amount * period / rate > period:
                raise QuotaExceeded(name, rate, period, f"That is more than your {rate:,} {unit}.")
            raise QuotaExceeded(name, rate, wait, f"You have reached your limit of {rate:,} {unit}; "
                                                  f"try again in {max(1, math.ceil(wait))} s.")

    # ---- GET /api/usage ------------------------------------------------------------------------

    async def usage(self, owner: str) -> dict[str, Any]:
        """Each limit with what the user used of it now (`resetsIn`: seconds until all of it is
        back); names as in CHAT_AGENT_LIMITS, camelCased."""
        now = self._clock()
        shown: dict[str, Any] = {}
        for name, limit in self.limits.items():
            entry: dict[str, Any] = {"limit": limit}
            if name in _RATES:
                tat = await self.counters.tat(owner, name) if limit is not None else None
                left = max(0.0, (tat or now) - now)
                entry["used"] = math.ceil(left * limit / _RATES[name] - 1e-6) if limit else None
                entry["resetsIn"] = math.ceil(left)
            elif name == "tokens_per_day":
                day = now - now % DAY
                entry["used"] = await self.store.tokens_since(owner, day)
                entry["resetsIn"] = math.ceil(day + DAY - now)
            elif name == "concurrent_turns":
                entry["used"] = await self.store.running_turn_count(owner)
            elif name == "sockets":
                entry["used"] = await self.counters.held(owner, "sockets", now) if limit is not None else None
            shown[camel(name)] = entry
        return shown

    # ---- upkeep --------------------------------------------------------------------------------

    async def _renew(self) -> None:
        await self.counters.renew(list(self._holds.values()), self._clock() + HOLD_SECONDS)

    async def _sweep(self) -> None:
        await self.counters.sweep(self._clock())

    async def _every(self, seconds: float, job: Callable[[], Any]) -> None:
        while True:
            await asyncio.sleep(seconds)
            try:
                await job()
            except Exception:  # the store or Redis away for a moment: next time
                log.warning("quota upkeep failed (%s); trying again in %g s", job.__name__, seconds, exc_info=True)

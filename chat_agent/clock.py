"""The wall clock, read in one place: the times the store keeps (when a message, a turn or a
version was made; when a lease runs out, on SQLite). Durations, timeouts and pauses use the
event loop's clock (`loop.time()`), never this one.

`now()` reads `wall`: the process clock, unless a deterministic simulation (tests/sim) set
its virtual clock there for the tasks it runs, so that a run is a function of its seed.
"""

from __future__ import annotations

import time
from contextvars import ContextVar
from typing import Callable

wall: ContextVar[Callable[[], float]] = ContextVar("wall", default=time.time)


def now() -> float:
    """Seconds since the epoch."""
    return wall.get()()

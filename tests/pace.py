"""How long a test may wait on this machine: waits scaled by how busy it is.

A wait that is right on an idle laptop (a server answers /health in a second) fails on a
2-core CI box that also runs two test workers, their servers and someone's stress. A wait
is an upper bound only (a test never sleeps it out), so scaling it up costs nothing when
things go well and only makes a real hang take longer to report.

    from tests import pace
    await asyncio.wait_for(ws.recv(), pace.scaled(10))
    assert took < pace.scaled(1.0)           # a generous bound, wider on a busy machine

`factor()` is read fresh on each call: load that rises during a wait lengthens it.
CHAT_AGENT_TEST_PACE=N forces the factor (1 on a machine you trust, 5 to try a slow one).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

LIMIT = 8.0  # past this the machine is not busy but broken: a wait should still end


def cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def load() -> float:
    """Runnable work per CPU: the 1-minute load average, or the number of runnable tasks
    right now when that is higher (the average lags a load that has just started)."""
    try:
        fields = Path("/proc/loadavg").read_text().split()
        average, running = float(fields[0]), int(fields[3].split("/")[0])
    except (OSError, IndexError, ValueError):
        average, running = os.getloadavg()[0], 0
    return max(average, running - 1) / cpus()  # -1: the reader itself is running


def factor() -> float:
    """1 on a machine with a CPU to spare for each runnable task, up to LIMIT when loaded."""
    forced = os.environ.get("CHAT_AGENT_TEST_PACE")
    if forced:
        return max(1.0, float(forced))
    return min(LIMIT, max(1.0, load()))


def scaled(seconds: float) -> float:
    """`seconds` on a quiet machine, longer on a busy one."""
    return seconds * factor()


class Deadline:
    """A deadline that moves with the load: `expired()` asks the factor again each time.

    `base` is what the wait would be on a quiet machine."""

    def __init__(self, base: float):
        self.base = base
        self.started = time.monotonic()

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def left(self) -> float:
        return max(0.0, scaled(self.base) - self.elapsed())

    def expired(self) -> bool:
        return self.elapsed() > scaled(self.base)

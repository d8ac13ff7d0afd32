"""The tasks a turn's tool calls run in, so that an abort stops them with the turn itself.

Cancelled only through the turn's task, a tool unwinds one turn of the event loop after the
turn saw its cancellation, and the turn goes on one more after that, once it sees them end:
under load a turn of the loop takes tens of ms (issue 23 measured a tool's abort at 40-47 ms
median, a stream's at 24-35 ms, with 50 sessions streaming in bursts). An abort that
cancels these first has them unwind in the same turn of the loop as the turn's own task,
ahead of it, so that the turn finds them ended and publishes its `done` at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any


class ToolTasks:
    """Starts a turn's tool calls as tasks and cancels those still running on `cancel`."""

    def __init__(self) -> None:
        self._running: set[asyncio.Task[Any]] = set()

    def start(self, coro: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._running.add(task)
        task.add_done_callback(self._running.discard)
        return task

    def cancel(self) -> None:
        """Cancels every call still running (the turn's task is cancelled next, by the caller):
        what a tool does on cancellation (killing a child process, say) starts now."""
        for task in tuple(self._running):
            task.cancel()

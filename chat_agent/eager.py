"""Running a coroutine at once, in the caller's step, instead of in the event loop's next turn.

A task made with `create_task` first runs in the loop's next turn, after every callback
ready now. Under load a turn of the loop takes tens of ms (200 streams' events), and a frame
that went from its commit to its socket through a new task waited that long once more
(measured at 200 sessions: 15-27 ms of a turn's first text). Started eagerly, a write the
socket takes at once (nearly always) is done within the commit's callback; only one that has
to wait (a client that does not read, frames read back from the store) goes on as a task.
What Python 3.12 calls an eager task (`eager_start=True`), for 3.11 as well.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def eager(coro: Coroutine[Any, Any, T]) -> asyncio.Future[T]:
    """Runs `coro` until it first waits. Returns a future already settled with its outcome
    when it never did (its callbacks still run in the loop's next turn: look at `done()`
    first where that matters), else the task that goes on with it."""
    loop = asyncio.get_running_loop()
    try:
        waiting = coro.send(None)
    except StopIteration as stop:
        return _settled(loop, result=stop.value)
    except asyncio.CancelledError:
        return _settled(loop, cancelled=True)
    except Exception as exc:  # its failure, for whoever looks at the future, as with a task
        return _settled(loop, error=exc)
    return loop.create_task(_rest(coro, waiting))


def _settled(loop: asyncio.AbstractEventLoop, *, result: Any = None, error: Exception | None = None,
             cancelled: bool = False) -> asyncio.Future[Any]:
    future = loop.create_future()
    if cancelled:
        future.cancel()
    elif error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)
    return future


async def _rest(coro: Coroutine[Any, Any, T], waiting: Any) -> T:
    """Goes on with a coroutine that was started and is waiting for `waiting` (a future it
    yielded, or None for a bare yield), step by step as a task would."""
    while True:
        try:
            if waiting is None:
                await asyncio.sleep(0)
            else:
                await asyncio.wait([waiting])
            cancelled = None
        except asyncio.CancelledError as exc:
            # As a task does: what it waits for is cancelled and it sees that; when that was
            # over already, the cancellation is thrown in where it waits.
            cancelled = None if waiting is not None and waiting.cancel() else exc
        try:
            waiting = coro.send(None) if cancelled is None else coro.throw(cancelled)
        except StopIteration as stop:
            return stop.value

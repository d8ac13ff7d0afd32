"""A sync tool's call, in a thread of its own."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from typing import Any, Callable


async def in_thread(name: str, fn: Callable[..., Any], *args: Any) -> Any:
    """`fn(*args)` in a new daemon thread; the await ends at once when cancelled.

    Not the loop's default executor: Python cannot stop a thread, so a sync tool that hangs
    keeps its thread after the call was cancelled or timed out, and a handful of those would
    fill the few workers the store and the file code run their blocking work on. A daemon
    thread also cannot hold up the process's exit.
    """
    loop = asyncio.get_running_loop()
    done: asyncio.Future[Any] = loop.create_future()
    context = contextvars.copy_context()  # tracing spans and the like, as run_in_executor would

    def work() -> None:
        try:
            outcome = (context.run(fn, *args), None)
        except BaseException as exc:  # handed to the awaiting task, raised there
            outcome = (None, exc)
        try:
            loop.call_soon_threadsafe(_settle, done, *outcome)
        except RuntimeError:  # the loop is closed: nobody waits any more
            pass

    threading.Thread(target=work, name=f"tool:{name}", daemon=True).start()
    return await done


def _settle(done: asyncio.Future[Any], value: Any, exc: BaseException | None) -> None:
    if done.done():  # cancelled: the result is dropped
        return
    if exc is not None:
        done.set_exception(exc)
    else:
        done.set_result(value)

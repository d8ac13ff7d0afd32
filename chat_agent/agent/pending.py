"""What a turn waits for from outside it, by id: an approval, a review decision, a client's
tool result. The turn waits on its id; the conversation that owns the turn settles it when
the answer comes (from any socket or instance); the wait gives up after a timeout."""

from __future__ import annotations

import asyncio
from typing import Generic, TypeVar

T = TypeVar("T")


class Pending(Generic[T]):
    def __init__(self) -> None:
        self._waiting: dict[str, asyncio.Future[T]] = {}

    async def wait(self, key: str, timeout: float, timed_out: T) -> T:
        """The answer settled under `key`, or `timed_out` once `timeout` seconds passed."""
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._waiting[key] = future
        try:
            # Not wait_for: on 3.11 it drops a cancellation (an abort) that comes with the answer.
            async with asyncio.timeout(timeout):
                return await future
        except TimeoutError:
            return timed_out
        finally:
            self._waiting.pop(key, None)

    def settle(self, key: str, answer: T) -> bool:
        """False when nothing waits under `key` (unknown, answered already, or timed out)."""
        future = self._waiting.pop(key, None)
        if future is None or future.done():
            return False
        future.set_result(answer)
        return True

"""Asking the instance that owns a conversation to do something, and waiting for its answer.

Requests (a client's command, a background job) travel over the bus to one instance; the
answer comes back the same way, matched by the request's id.
"""

from __future__ import annotations

import asyncio

from chat_agent.ids import new_id
from chat_agent.sessions.bus import Bus
from chat_agent.sessions.messages import Answer, Command, RunJob

FORWARD_TIMEOUT = 10.0  # seconds an owner has to answer a forwarded command


class OwnerUnreachable(Exception):
    """The instance holding the lease did not answer in time."""


class Forwarder:
    def __init__(self, bus: Bus):
        self._bus = bus
        self._waiting: dict[str, asyncio.Future[Answer]] = {}

    @property
    def instance(self) -> str:
        return self._bus.instance

    def request_id(self) -> str:
        return new_id()

    async def ask(self, instance: str, request: Command | RunJob, *, timeout: float = FORWARD_TIMEOUT) -> Answer:
        """Sends the request to `instance` and waits for its answer (OwnerUnreachable after
        `timeout` seconds)."""
        answer: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        self._waiting[request.id] = answer
        try:
            await self._bus.send(instance, request)
            async with asyncio.timeout(timeout):  # not wait_for: 3.11's drops a cancellation that comes with the answer
                return await answer
        except TimeoutError:
            raise OwnerUnreachable(instance) from None
        finally:
            self._waiting.pop(request.id, None)

    def answered(self, answer: Answer) -> None:
        future = self._waiting.get(answer.id)
        if future is not None and not future.done():
            future.set_result(answer)

"""While the store is unavailable (a cut database, a full disk), replies go on from memory.

The writer keeps what it could not store, in order, and stores it once the store is back.
Meanwhile every open conversation shows its frames as they are logged (`LiveConversation.
show_uncommitted`), the clients of a running turn are told `status: store_unavailable` at
least every STATUS_EVERY seconds (PROTOCOL 1.2 "Live status"), and a turn that has gone on
unsaved for TURN_LIMIT seconds is ended, once, with an `error` that says why: what it said
stays in memory until it is stored.
"""

from __future__ import annotations

import asyncio
import logging

from chat_agent.protocol import StatusFrame
from chat_agent.sessions.registry import Registry
from chat_agent.store import StoreWriter

log = logging.getLogger(__name__)

STATUS_EVERY = 5.0  # seconds between two `status` frames of one turn
TURN_LIMIT = 120.0  # seconds a turn goes on while nothing of it can be stored
DETAIL = "The server cannot save this reply right now (its storage is unreachable); it goes on and is saved once " \
         "the storage is back."
ENDED = ("The server could not save this reply for a long while (its storage is unreachable), so it stopped here; "
         "what you saw is saved once the storage is back.")


class StoreWatch:
    def __init__(self, writer: StoreWriter, registry: Registry, *, every: float = STATUS_EVERY,
                 turn_limit: float = TURN_LIMIT):
        self._writer = writer
        self._registry = registry
        self._every = every
        self._turn_limit = turn_limit

    async def serve(self) -> None:
        """Follows the writer's `availability` for as long as the instance runs."""
        ticker: asyncio.Task[None] | None = None
        try:
            while True:
                available = await self._writer.availability.get()
                if ticker is not None:
                    ticker.cancel()
                    ticker = None
                if not available:
                    for live in self._registry.all():
                        live.show_uncommitted()
                    ticker = asyncio.get_running_loop().create_task(self._tell(), name="store-unavailable")
        finally:
            if ticker is not None:
                ticker.cancel()

    async def _tell(self) -> None:
        while True:
            elapsed = round(self._writer.unavailable_for(), 1)
            for live in self._registry.all():
                turn = live.turn
                if turn is None or not turn.shown:
                    continue
                if elapsed >= self._turn_limit:
                    log.warning("%s: ending turn %s, unsaved for %.0f s", live.id, turn.id, elapsed)
                    self._registry.spawn(turn.fail(ENDED), f"unsaved:{live.id}")
                    continue
                live.notify(StatusFrame(message_id=turn.message_id, state="store_unavailable", detail=DETAIL,
                                        elapsed=elapsed))
            await asyncio.sleep(self._every)

"""When what a conversation holds in memory and what the store holds part ways, and when a
process or an instance stops in the middle of a turn.

- Start-up: turns that were running when the process died are closed as interrupted
  (`recover`): opening a conversation closes what its store holds as running.
- Writes lost (`writes_lost`): the writer could not store some of a conversation's ops.
  Refused because another instance took the conversation: its sockets follow the new owner.
  The store failed: what ran stops, the conversation is reloaded, and its clients are told.
- A lease lost (`lease_lost`): another instance owns the conversation now; follow it.
- A lease expired (`take_over`): its holder stopped renewing it; the turn it ran is closed
  here as interrupted, and its clients, wherever they are, told.
"""

from __future__ import annotations

import logging

from chat_agent.protocol import Done, ErrorFrame
from chat_agent.sessions.cut import NOT_SAVED, OWNER_LOST, RESTARTED
from chat_agent.sessions.live import CLOSE_INTERNAL, LiveConversation
from chat_agent.sessions.ownership import Claim
from chat_agent.sessions.registry import CLOSE_NOT_FOUND, Registry, deleted
from chat_agent.store import Lease

log = logging.getLogger(__name__)

CHANGE_NOT_SAVED = "The server could not save that change (its storage failed); what you see now is what was kept."
GONE_NOT_SAVED = ("The server could not save this conversation's latest changes (its storage failed); reconnect "
                  "to see what was kept.")


class Recovery:
    def __init__(self, registry: Registry):
        self._registry = registry
        self._store = registry.store
        self._writer = registry.writer
        self._ownership = registry.ownership

    async def recover(self) -> int:
        """Closes the turns the last process left running; how many there were."""
        turns = await self._store.running_turns()
        for owner, conversation_id in dict.fromkeys((t.owner, t.conversation_id) for t in turns):
            try:
                live = await self._registry.open(owner, conversation_id, cut=RESTARTED)
                if live is not None:
                    self._registry.release(live)
            except Exception:
                log.exception("could not recover the turn(s) of %s", conversation_id)
        await self._writer.flush()
        if turns:
            log.warning("continued or closed %d turn(s) the last process left running", len(turns))
        return len(turns)

    # ---- writes the store lost ---------------------------------------------------------------

    def writes_lost(self, scope: str) -> None:
        """The writer could not store some of `scope`'s ops and refuses its writes until
        whoever holds that scope's state in memory has brought it back in line."""
        live = self._registry.get(scope)
        if live is None:
            self._writer.reopen(scope)  # nothing in memory builds on it (memories are read per use)
            return
        if live.writes_lost():
            self._registry.spawn(self._writes_failed(live), f"bring-back:{scope}")

    async def _writes_failed(self, live: LiveConversation) -> None:
        """Lost writes: refused because another instance took the conversation (follow it
        now), or the store failed (bring it back in line)."""
        epoch = self._ownership.epoch(live.id)
        try:
            lease = await self._store.get_lease(live.id)
        except Exception:  # the store fails: bring it back, which tells the clients or evicts them
            await self._bring_back(live)
            return
        if epoch is not None and lease is not None and (lease.instance, lease.epoch) == (self._ownership.instance, epoch):
            await self._bring_back(live)
            return
        # Written without the lease (given back, or taken by another instance): follow its owner.
        self._ownership.forget(live.id)
        await self._follow_instead(live)

    async def _bring_back(self, live: LiveConversation) -> None:
        """Stops what ran, reloads the conversation from the store and tells its clients what
        failed; when even that cannot be stored, closes their sockets so that they reconnect
        and see what was kept (`session`, `resume`)."""
        kept = False
        try:
            stopped = await self._stop(live)
            kept = not live.unsaved and await self._reload(live, stopped)
        except Exception:
            log.exception("could not bring %s back in line with the store", live.id)
        finally:
            if not kept:  # before those waiting for the outcome (a `session`) learn it
                self._evict(live)
            live.recovered()

    @staticmethod
    async def _stop(live: LiveConversation) -> str | None:
        """Stops what runs (what it still writes is refused); the id of the reply it was
        writing, None if nothing ran."""
        turn = live.turn
        if turn is None:
            return None
        await turn.abort()
        return turn.message_id

    async def _reload(self, live: LiveConversation, stopped: str | None) -> bool:
        """Whether the conversation was reloaded and its clients told, all of it stored."""
        if not await self._registry.reload(live):
            return False  # deleted meanwhile
        self._writer.reopen(live.id)
        if not await self._registry.close_cut_turns(live, NOT_SAVED):
            if stopped is None:
                live.publish(ErrorFrame(code="internal", message=CHANGE_NOT_SAVED))
            else:  # a message still being checked, or a turn whose start was lost
                live.publish(ErrorFrame(code="internal", message=NOT_SAVED.message))
                live.publish(Done(message_id=stopped, stop_reason="error"))
        await self._writer.flush()
        return not self._writer.lost(live.id)

    def _evict(self, live: LiveConversation) -> None:
        """Forgets the conversation (the next `open` loads it, closing a cut turn) and closes
        its sockets with an `error` that has no seq, since none could be stored."""
        self._registry.close_all(live, CLOSE_INTERNAL, ErrorFrame(conversation_id=live.id, code="internal",
                                                                  message=GONE_NOT_SAVED))
        self._writer.reopen(live.id)

    # ---- leases ------------------------------------------------------------------------------

    def lease_lost(self, conversation_id: str) -> None:
        live = self._registry.get(conversation_id)
        if live is None:
            return
        if live.writes_lost():
            self._registry.spawn(self._follow_instead(live), f"lease-lost:{conversation_id}")

    async def _follow_instead(self, live: LiveConversation) -> None:
        """Another instance owns the conversation now: what ran here stops (its writes are
        refused), and its sockets follow the new owner from what the store holds."""
        try:
            await self._stop(live)
            await self._writer.flush()
            if live.unsaved:  # its sockets were shown frames the new owner's will not continue
                self._evict(live)
                return
            if not await self._registry.reload(live):
                self._registry.close_all(live, CLOSE_NOT_FOUND, deleted(live.id))
                return
            self._writer.reopen(live.id)
            running = bool(await self._store.running_turns(live.id))
            if not self._ownership.holds(live.id):  # (taken back meanwhile, a lease that expired: ours to run)
                live.follow(running=running).catch_up()
        except Exception:
            log.exception("could not hand %s over to its new owner", live.id)
            self._evict(live)
        finally:
            live.recovered()

    async def take_over(self, lease: Lease) -> None:
        """The lease's holder stopped renewing it (it died, or lost the database): the turn it
        ran is closed as interrupted here, and its clients, wherever they are, told."""
        turns = await self._store.running_turns(lease.conversation_id)
        if not turns:
            # Nothing was running (or it is an instance's own lease): free it, so that it is
            # not found expired again at every sweep.
            if (await self._ownership.claim(lease.conversation_id))[0] is Claim.GAINED:
                await self._ownership.release(lease.conversation_id)
            return
        turn = turns[0]
        live = (self._registry.live(turn.owner, turn.conversation_id)
                or await self._registry.open(turn.owner, turn.conversation_id, cut=OWNER_LOST))
        if live is None:
            return
        if live.recovering:  # handed over, say: taken at a later sweep, once that is done
            return
        if await self._registry.close_cut_turns(live, OWNER_LOST) or not live.running:
            log.warning("took over %s from instance %s, whose lease expired", live.id, lease.instance)
        self._registry.release(live)

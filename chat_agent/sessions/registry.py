"""The conversations open in this process: found, opened (loaded from the store), created,
and let go once nobody listens and nothing runs.

A conversation stays in memory while someone listens or a turn runs, so a turn survives
its socket and every connection sees the same live state. With several instances, opening
one also settles who owns it (`ownership`): a turn the store holds as running is closed
here when this instance can take the conversation, else followed from its owner.
"""

from __future__ import annotations

import asyncio
import logging
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Callable, Coroutine

from chat_agent import clock
from chat_agent.canvas.artifact import Canvas
from chat_agent.config import Settings
from chat_agent.context.conversation import ConversationManager
from chat_agent.context.tokens import TokenCounter
from chat_agent.ids import new_id
from chat_agent.protocol import ErrorFrame
from chat_agent.rejection import FrameRejected
from chat_agent.sessions.bus import Bus
from chat_agent.sessions.cut import NOT_SAVED, OWNER_LOST, Cut, Resumer, end_cut_turn
from chat_agent.sessions.forwarding import Forwarder, OwnerUnreachable
from chat_agent.sessions.live import Listener, LiveConversation
from chat_agent.sessions.messages import Deleted, RunJob
from chat_agent.sessions.ownership import Claim, Ownership
from chat_agent.sessions.turn import RunningTurn
from chat_agent.store import (ArtifactRecord, ConversationRecord, CreateConversation, DeleteConversation, HistorySize,
                              Store, StoreWriter)

log = logging.getLogger(__name__)

CLOSE_NOT_FOUND = 4404  # the conversation is gone
# What an open conversation holds: no history, only the model-facing history's size.
Loaded = tuple[ConversationRecord, HistorySize, ArtifactRecord | None]
# A lease released or expired between looking and forwarding: look again, a little later.
CLAIM_ATTEMPTS = 20
CLAIM_RETRY = 0.05
JOB_TIMEOUT = 120.0  # seconds an owner has to run a background job handed to it (a title)


def deleted(conversation_id: str) -> ErrorFrame:
    return ErrorFrame(conversation_id=conversation_id, code="not_found", message="This conversation was deleted.")


class Registry:
    def __init__(self, settings: Settings, store: Store, writer: StoreWriter, counter: TokenCounter, bus: Bus,
                 ownership: Ownership, forwarder: Forwarder, resumer: Resumer | None = None):
        self.settings = settings
        self.store = store
        self.writer = writer
        self.bus = bus
        self.ownership = ownership
        self._forwarder = forwarder
        self._resumer = resumer  # continues cut turns (None: they are closed)
        self._counter = counter
        self._live: dict[str, LiveConversation] = {}
        self._loading: dict[str, asyncio.Lock] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        # Conversations taken from another holder whose cut turns are not closed yet (see `claim`).
        self._unchecked: set[str] = set()

    def get(self, conversation_id: str) -> LiveConversation | None:
        return self._live.get(conversation_id)

    def live(self, owner: str, conversation_id: str) -> LiveConversation | None:
        live = self._live.get(conversation_id)
        return live if live is not None and live.owner == owner else None

    def all(self) -> list[LiveConversation]:
        return list(self._live.values())

    # ---- listeners ----------------------------------------------------------------------------

    async def attach(self, owner: str, conversation_id: str | None, listener: Listener) -> LiveConversation | None:
        """Opens (or creates, with no id) a conversation and adds the listener to it, or
        returns None when it does not exist for this owner."""
        live = await (self._create(owner) if conversation_id is None else self.open(owner, conversation_id))
        if live is not None:
            live.listeners[listener] = None
        return live

    async def attach_thread(self, owner: str, thread_id: str, listener: Listener) -> LiveConversation | None:
        """`attach` for a client that names the conversation itself (AG-UI's threadId): the
        caller's conversation of that id, created under it when nobody has one; None when
        the id is someone else's."""
        live = await self.open(owner, thread_id)
        if live is None:
            async with self._loading_lock(thread_id):
                live = self._live.get(thread_id)
                if live is None and not await self.store.conversation_taken(thread_id):
                    live = await self._create(owner, thread_id)
        if live is None or live.owner != owner:
            return None
        live.listeners[listener] = None
        return live

    def detach(self, live: LiveConversation, listener: Listener) -> None:
        live.listeners.pop(listener, None)
        self.release(live)

    def release(self, live: LiveConversation) -> None:
        """Forgets the conversation when nobody listens and nothing runs; its lease goes too."""
        if not live.listeners and not live.busy and self._live.get(live.id) is live:
            del self._live[live.id]
            if live.follower is not None:
                live.follower.stop()
            self.let_go(live.id)

    def keep(self, live: LiveConversation) -> bool:
        """Holds the conversation again if it was let go meanwhile (a turn starts in it now);
        False when another copy of it was opened since, which is the one to use."""
        return self._live.setdefault(live.id, live) is live

    def let_go(self, conversation_id: str) -> None:
        """Gives the lease back, unless the conversation is busy again by then: the next
        command, wherever it arrives, takes it without a hop to this instance."""
        def idle() -> bool:
            live = self._live.get(conversation_id)
            return live is None or not live.busy

        if self.ownership.holds(conversation_id):
            self.spawn(self.ownership.release(conversation_id, idle), f"release:{conversation_id}")

    def close_all(self, live: LiveConversation, code: int, frame: ErrorFrame) -> None:
        """Closes every socket on the conversation with `frame` and forgets it."""
        live.close_listeners(code, frame.to_json())
        live.retire()
        if self._live.get(live.id) is live:
            del self._live[live.id]

    async def delete(self, owner: str, conversation_id: str, cancel_jobs: Callable[[str], None]) -> bool:
        """Deletes the conversation (its running turn aborted, its sockets closed, its jobs
        cancelled); False when the owner has no such conversation."""
        live = self.live(owner, conversation_id)
        if live is None and await self.store.get_conversation(owner, conversation_id) is None:
            return False
        # While it is deleted, nothing opens it from the store again (a background job's late
        # attach would hold a copy that a second DELETE finds); a copy opened just before is
        # closed like the first.
        async with self._loading_lock(conversation_id):
            for _ in range(2):  # the copy found first, then one opened before the lock was taken
                if (live := self.live(owner, conversation_id)) is not None:
                    await live.abort()
                    self.close_all(live, CLOSE_NOT_FOUND, deleted(conversation_id))
            cancel_jobs(conversation_id)
            # Deleting wins over whoever owns it: not fenced by a lease (one given back keeps its
            # fence, which would refuse this). An owner elsewhere finds nothing left to write to.
            self.writer.unfence(conversation_id)
            await self.writer.commit([DeleteConversation(owner, conversation_id)])
        # Sockets on other instances learn it from the bus (an owner elsewhere stops its turn:
        # its next write finds nothing to write to).
        self.bus.broadcast(Deleted(conversation=conversation_id))
        await self.ownership.release(conversation_id)
        return True

    def spawn(self, job: Coroutine[Any, Any, Any], name: str) -> None:
        """Runs `job` in the background, held until it ends (an abort sent by a request that
        is going away must still be carried out)."""
        task = asyncio.get_running_loop().create_task(job, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def settle(self, timeout: float | None = None) -> None:
        """Waits for the background work spawned so far; what has not ended after `timeout`
        seconds (it waits on a store that does not answer) is cancelled."""
        tasks = set(self._tasks)
        if not tasks:
            return
        _, late = await asyncio.wait(tasks, timeout=timeout)
        if late:
            log.warning("stopping %d background tasks that did not end in %.0f s: %s", len(late), timeout or 0,
                        ", ".join(sorted(task.get_name() for task in late)))
            for task in late:
                task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # ---- opening -----------------------------------------------------------------------------

    async def _create(self, owner: str, conversation_id: str | None = None) -> LiveConversation:
        now = clock.now()
        record = ConversationRecord(id=conversation_id or new_id(hex_chars=32), owner=owner, title=None, created_at=now,
                                    updated_at=now, last_seq=0)
        create = CreateConversation(owner, record.id, now)
        live = self._remember(record, HistorySize(), None)
        if conversation_id is None:
            live.unstored = create  # stored with its first message (PROTOCOL 1.2), see `store_now`
        else:  # a client-named id (AG-UI's threadId) is claimed in the store at once, and
            # stored before the caller's first command reads it there
            self.writer.submit([create])
            await self.writer.wait_for(self.writer.ticket)
        return live

    async def open(self, owner: str, conversation_id: str, *, cut: Cut | None = None) -> LiveConversation | None:
        """The conversation, from memory or loaded from the store. A turn the store holds as
        running is one nothing runs any more when this instance can take the conversation:
        it is closed (or continued) on loading, with `cut` saying why; by default, why is
        told by the lease (`close_cut_turns`)."""
        live = self._live.get(conversation_id)
        if live is not None:
            return live if live.owner == owner else None
        async with self._loading_lock(conversation_id):
            live = self._live.get(conversation_id)
            if live is not None:
                return live if live.owner == owner else None
            await self.writer.flush()  # a turn that just ended may not have committed its end yet
            loaded = await self.load(owner, conversation_id)
            if loaded is None:
                return None
            # A copy let go before may have been kept again while the store was read (a turn
            # was continued in it, `keep`): that copy is the conversation; a second one would
            # close the turn it runs.
            live = self._live.get(conversation_id)
            if live is not None:
                return live if live.owner == owner else None
            live = self._remember(*loaded)
            await self.close_cut_turns(live, cut)
        return live

    @asynccontextmanager
    async def _loading_lock(self, conversation_id: str) -> AsyncIterator[None]:
        """Held while the conversation is loaded, created or deleted here: one at a time. The
        lock is forgotten once its holder is done, whichever way its block ended."""
        async with self._loading.setdefault(conversation_id, asyncio.Lock()):
            try:
                yield
            finally:
                self._loading.pop(conversation_id, None)

    async def load(self, owner: str, conversation_id: str) -> Loaded | None:
        record = await self.store.get_conversation(owner, conversation_id)
        if record is None:
            return None
        size = await self.store.history_size(owner, conversation_id, "model")
        return record, size, await self.store.get_artifact(owner, conversation_id)

    def parts(self, record: ConversationRecord, size: HistorySize,
              artifact: ArtifactRecord | None) -> tuple[ConversationRecord, ConversationManager, Canvas]:
        """What `LiveConversation.reload` takes, made from what the store holds."""
        manager = ConversationManager(record.owner, record.id, store=self.store, size=size, counter=self._counter,
                                      writer=self.writer, summary_chars=self.settings.summary_chars,
                                      max_tokens=self.settings.max_context_tokens,
                                      overhead=record.context_overhead, leaf=record.leaf_id)
        canvas = Canvas(record.owner, record.id, artifact, self.writer, history_epoch=lambda: manager.epoch)
        return record, manager, canvas

    def _remember(self, record: ConversationRecord, size: HistorySize,
                  artifact: ArtifactRecord | None) -> LiveConversation:
        live = LiveConversation(*self.parts(record, size, artifact), self.writer, self.store,
                                self.bus, idle=self.let_go)
        self._live[record.id] = live
        return live

    async def close_cut_turns(self, live: LiveConversation, cut: Cut | None = None) -> bool:
        """Closes the turns the store holds as running, if this instance owns the conversation
        or can take it (else their owner runs them, and they are followed); whether it did.
        Without a `cut`, the lease tells why nothing runs them: taken now (expired, given
        back), their instance stopped and they go on here (OWNER_LOST); held all along, this
        instance dropped them because its store failed (NOT_SAVED), and they stop. A client
        that connects to a conversation whose instance has just died, before the takeover
        finds it, must not turn a continuation into an error."""
        if not await self.store.running_turns(live.id):
            return False
        if not await self.own(live, cut or OWNER_LOST):  # taking it now closes them
            live.follow(running=True)
            return False
        return await self._close_cut(live, cut or NOT_SAVED)  # as they are now that it is ours

    async def _close_cut(self, live: LiveConversation, cut: Cut) -> bool:
        closed = False
        turns = await self.store.running_turns(live.id)
        # Two turns left running (a start stored, its end lost) share a history no step of
        # either can be told apart in: both are closed.
        resumer = self._resumer if len(turns) == 1 else None
        for turn in turns:
            ended = await end_cut_turn(live, self.store, turn, cut, resumer, self.keep)
            if isinstance(ended, RunningTurn):
                self.spawn(self._continued(live, ended), f"continued:{live.id}")
            closed = bool(ended) or closed
        return closed

    async def _continued(self, live: LiveConversation, turn: RunningTurn) -> None:
        """A turn continued here: the conversation may be let go once it is over."""
        await turn.over()
        self.release(live)

    # ---- ownership ----------------------------------------------------------------------------

    async def own(self, live: LiveConversation, cut: Cut = OWNER_LOST) -> bool:
        """Whether this instance owns the conversation, taking it when nobody does; its
        state is read again from the store when it changed hands."""
        return (await self.claim(live, cut))[0]

    async def claim(self, live: LiveConversation, cut: Cut = OWNER_LOST) -> tuple[bool, str | None]:
        """Whether this instance owns the conversation (taking it when free), and else who does.
        Taken from another holder (its lease expired or given back), the turns the store
        still holds as running are cut off (nothing runs them any more): closed here, with
        `cut` saying why, before anything else is done with the conversation."""
        # Done to the copy in use: this one may have been let go and another opened since (a
        # command held it meanwhile), and a copy that is not kept closes nothing.
        live = self._live.get(live.id, live)
        claim, holder = await self.ownership.claim(live.id, lambda: self.refresh(live))
        if claim is Claim.GAINED:
            self._unchecked.add(live.id)
        if claim is not Claim.TAKEN and live.id in self._unchecked:
            await self._close_cut(live, cut)  # tried again at the next claim if the store fails
            self._unchecked.discard(live.id)
        return claim is not Claim.TAKEN, holder

    async def refresh(self, live: LiveConversation) -> None:
        """Takes what the store holds: another instance may have written since this one
        held the conversation."""
        if live.unstored is not None:
            return  # not stored yet (no message): nothing anyone wrote to read
        if not await self.reload(live):
            raise FrameRejected("not_found", "This conversation was deleted.")

    async def reload(self, live: LiveConversation) -> bool:
        """Takes what the store holds, and gives the conversation's listeners here the stored
        frames they did not get yet (see `LiveConversation.reload`); False if it was deleted."""
        loaded = await self.load(live.owner, live.id)
        if loaded is None:
            return False
        shown_lost = live.unsaved  # listeners here were shown frames the store never took
        live.reload(*self.parts(*loaded))
        if not await live.deliver_stored() or shown_lost:
            live.missed()
        return True

    async def active_at(self, live: LiveConversation) -> float | None:
        """When the conversation last stored a frame (its last turn's end, mostly), as the
        store says: another instance may own it. None if it was never stored."""
        record = await self.store.get_conversation(live.owner, live.id)
        return record.updated_at if record is not None else None

    async def forward_job(self, live: LiveConversation, kind: str) -> bool:
        """Hands a background job that writes the conversation (its title) to the instance
        that owns it, and waits until it ran there: True. False when the owner is this
        instance (it held the conversation or has just taken it): run it here."""
        for _ in range(CLAIM_ATTEMPTS):
            owned, holder = await self.claim(live)
            if owned:
                return False
            if holder is None:
                await asyncio.sleep(CLAIM_RETRY)
                continue  # released meanwhile: take it
            if not self.bus.shared:
                return True  # another process owns it, out of reach: its next turn's end runs it there
            request = RunJob(id=self._forwarder.request_id(), sender=self.bus.instance, conversation=live.id,
                             user=live.owner, job=kind)
            if (await self._forwarder.ask(holder, request, timeout=JOB_TIMEOUT)).status != "not_owner":
                return True
            await asyncio.sleep(CLAIM_RETRY)  # it let the conversation go meanwhile: take it, or find who has it
        raise OwnerUnreachable(f"no instance took job {kind} of {live.id}")

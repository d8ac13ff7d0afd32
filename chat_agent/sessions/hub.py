"""The open conversations of this process, and what clients ask of them.

Connections come and go; a conversation stays in memory while someone listens or a turn
runs, so a turn survives its socket and every connection sees the same live state. The
turn itself belongs to its LiveConversation; the hub finds, opens and closes conversations,
routes client commands to them, and hands finished turns to the background jobs.

With several instances, a command runs where the conversation is owned (`ownership`):
here when this instance holds the lease or can take it, else forwarded to the holder; a
conversation followed here shows the owner's frames, and its `session` is read from the
store (`replica`).
"""

from __future__ import annotations

import asyncio
import logging
import time

from chat_agent.agent.loop import Agent
from chat_agent.canvas.artifact import Canvas, artifact_state
from chat_agent.canvas.memory import MemoryBook
from chat_agent.config import Settings
from chat_agent.context.conversation import ConversationManager
from chat_agent.context.tokens import TokenCounter
from chat_agent.files.catalog import Files
from chat_agent.ids import new_id
from chat_agent.model.demo import NOTICE as DEMO_NOTICE
from chat_agent.protocol import (AnyClientFrame, ArtifactState, Done, ErrorFrame, MessageIn, SessionFrame, StopReason,
                                 ToolInfo, VisibleMessage)
from chat_agent.rejection import FrameRejected
from chat_agent.sessions.bus import Bus, Frame, Handlers, LocalBus
from chat_agent.sessions.commands import CLAIM_ATTEMPTS, CLAIM_RETRY, Commands
from chat_agent.sessions.cut import NOT_SAVED, OWNER_LOST, Cut, close_cut_turn
from chat_agent.sessions.jobs import ConversationJobs
from chat_agent.sessions.queue import JobQueue
from chat_agent.sessions.live import Listener, LiveConversation
from chat_agent.sessions.ownership import Claim, OwnerUnreachable, Ownership
from chat_agent.sessions.pages import visible_page
from chat_agent.sessions.prepare import TurnPreparer
from chat_agent.sessions.replica import session_from_store
from chat_agent.store import (ArtifactRecord, ConversationRecord, CreateConversation, DeleteConversation, HistorySize,
                              Lease, Store, StoreWriter)

log = logging.getLogger(__name__)

CLOSE_NOT_FOUND = 4404  # the conversation is gone
CLOSE_INTERNAL = 1011  # the socket's state is not what the store holds: reconnect to see it
CHANGE_NOT_SAVED = "The server could not save that change (its storage failed); what you see now is what was kept."
GONE_NOT_SAVED = ("The server could not save this conversation's latest changes (its storage failed); reconnect "
                  "to see what was kept.")
# What an open conversation holds: no history, only the model-facing history's size.
Loaded = tuple[ConversationRecord, HistorySize, ArtifactRecord | None]
# Seconds an owner has to run a background job handed to it (a title: one small model call).
JOB_TIMEOUT = 120.0
# A frame on the bus that says the conversation was deleted (seq 0: it is no frame of the log).
DELETED = "deleted"


class Hub:
    def __init__(self, settings: Settings, store: Store, writer: StoreWriter, agent: Agent, counter: TokenCounter,
                 files: Files, *, ownership: Ownership | None = None, bus: Bus | None = None,
                 queue: JobQueue | None = None):
        self.settings = settings
        self.store = store
        self.writer = writer
        self.agent = agent
        self.files = files
        self.bus = bus or LocalBus("local")
        self.ownership = ownership or Ownership(self.bus.instance, store, writer, self.bus,
                                                lease_seconds=settings.lease_seconds,
                                                sweep_seconds=settings.lease_seconds / 5)
        self.memories = MemoryBook(store, writer)
        self.jobs = ConversationJobs(settings, agent.model, self.memories, self, queue)
        self._counter = counter
        self._preparer = TurnPreparer(settings, agent, store, files, self.memories, counter)
        self._live: dict[str, LiveConversation] = {}
        self._loading: dict[str, asyncio.Lock] = {}
        self._recoveries: set[asyncio.Task[None]] = set()
        # Followed conversations: the instance whose frames the bus last brought (their owner).
        self._owners: dict[str, str] = {}
        writer.on_lost = self._writes_lost
        self.ownership.on_lost = self._lease_lost
        self.ownership.on_expired = self._take_over
        self.commands = Commands(self)
        self.ownership.on_command = self.commands.forwarded

    def bus_handlers(self) -> Handlers:
        return Handlers(frames=self._followed, direct=self.ownership.received, resync=self._resync)

    # ---- what is open -------------------------------------------------------------------------

    def is_running(self, conversation_id: str) -> bool:
        live = self._live.get(conversation_id)
        return live is not None and live.running

    def live(self, owner: str, conversation_id: str) -> LiveConversation | None:
        live = self._live.get(conversation_id)
        return live if live is not None and live.owner == owner else None

    async def visible_messages(self, owner: str, conversation_id: str) -> list[VisibleMessage]:
        """The whole visible history, with the running turn's reply as streamed so far."""
        live = self.live(owner, conversation_id)
        reply = live.reply() if live is not None else None
        await self.writer.flush()  # what was said a moment ago is in the store once committed
        items = await self.store.load_history(owner, conversation_id, "visible")
        messages = [VisibleMessage.model_validate(item.data) for item in items]
        if reply is not None and all(m.id != reply.id for m in messages):  # it may have ended meanwhile
            messages.append(reply)
        return messages

    async def history_page(self, owner: str, conversation_id: str, before: str | None,
                           limit: int) -> tuple[list[VisibleMessage], str | None] | None:
        """A page of the visible history (see `LiveConversation.page`); None for an unknown
        `before`."""
        live = self.live(owner, conversation_id)
        if live is not None:
            return await live.page(before, limit)
        await self.writer.flush()
        page = await self.store.history_page(owner, conversation_id, "visible", before, limit)
        return None if page is None else visible_page(page, None)

    async def artifact(self, owner: str, conversation_id: str) -> ArtifactState | None:
        live = self.live(owner, conversation_id)
        if live is not None:
            return live.canvas.state()
        return artifact_state(await self.store.get_artifact(owner, conversation_id))

    def tools(self) -> list[ToolInfo]:
        return [ToolInfo(name=a.name, enabled=a.enabled, reason=a.reason) for a in self.agent.registry.availability()]

    # ---- opening and closing ----------------------------------------------------------------

    async def attach(self, owner: str, conversation_id: str | None, listener: Listener) -> LiveConversation | None:
        """Opens (or creates, with no id) a conversation and adds the listener to it, or
        returns None when it does not exist for this owner."""
        live = await (self._create(owner) if conversation_id is None else self.open(owner, conversation_id))
        if live is not None:
            live.listeners.add(listener)
        return live

    def detach(self, live: LiveConversation, listener: Listener) -> None:
        live.listeners.discard(listener)
        self.release(live)

    def release(self, live: LiveConversation) -> None:
        if not live.listeners and not live.running and self._live.get(live.id) is live:
            del self._live[live.id]
            self._owners.pop(live.id, None)
            self._let_go(live.id)

    def _idle(self, live: LiveConversation) -> None:
        """The turn is over and its history let go: the lease goes too, so that the next
        command, wherever it arrives, takes the conversation without a hop to this instance."""
        if not live.running:
            self._let_go(live.id)

    def _let_go(self, conversation_id: str) -> None:
        """Gives the lease back, unless the conversation is busy again by then."""
        def idle() -> bool:
            live = self._live.get(conversation_id)
            return live is None or not live.running

        if self.ownership.holds(conversation_id):
            self._spawn(self.ownership.release(conversation_id, idle), f"release:{conversation_id}")

    def spawn(self, job, name: str) -> None:
        """Runs `job` in the background, held until it ends (an abort sent by a request that
        is going away must still be carried out)."""
        self._spawn(job, name)

    def _spawn(self, job, name: str) -> None:
        task = asyncio.get_running_loop().create_task(job, name=name)
        self._recoveries.add(task)
        task.add_done_callback(self._recoveries.discard)

    async def attach_thread(self, owner: str, thread_id: str, listener: Listener) -> LiveConversation | None:
        """`attach` for a client that names the conversation itself (AG-UI's threadId): the
        caller's conversation of that id, created under it when nobody has one; None when
        the id is someone else's."""
        live = await self.open(owner, thread_id)
        if live is None:
            lock = self._loading.setdefault(thread_id, asyncio.Lock())
            async with lock:
                live = self._live.get(thread_id)
                if live is None and not await self.store.conversation_taken(thread_id):
                    live = await self._create(owner, thread_id)
            self._loading.pop(thread_id, None)
        if live is None or live.owner != owner:
            return None
        live.listeners.add(listener)
        return live

    async def _create(self, owner: str, conversation_id: str | None = None) -> LiveConversation:
        now = time.time()
        record = ConversationRecord(id=conversation_id or new_id(hex_chars=32), owner=owner, title=None, created_at=now,
                                    updated_at=now, last_seq=0)
        self.writer.submit([CreateConversation(owner, record.id, now)])
        return self._remember(record, HistorySize(), None)

    async def open(self, owner: str, conversation_id: str, *, cut: Cut = NOT_SAVED) -> LiveConversation | None:
        """The conversation, from memory or loaded from the store. A turn the store holds as
        running is one nothing runs any more (this process runs every turn it started): it is
        closed on loading, with `cut` saying why."""
        live = self._live.get(conversation_id)
        if live is not None:
            return live if live.owner == owner else None
        lock = self._loading.setdefault(conversation_id, asyncio.Lock())
        async with lock:
            live = self._live.get(conversation_id)
            if live is not None:
                return live if live.owner == owner else None
            await self.writer.flush()  # a turn that just ended may not have committed its end yet
            loaded = await self._load(owner, conversation_id)
            if loaded is None:
                return None
            live = self._remember(*loaded)
            await self._close_cut_turns(live, cut)
        self._loading.pop(conversation_id, None)
        return live

    async def _load(self, owner: str, conversation_id: str) -> Loaded | None:
        record = await self.store.get_conversation(owner, conversation_id)
        if record is None:
            return None
        size = await self.store.history_size(owner, conversation_id, "model")
        return record, size, await self.store.get_artifact(owner, conversation_id)

    def _parts(self, record: ConversationRecord, size: HistorySize,
               artifact: ArtifactRecord | None) -> tuple[ConversationManager, Canvas]:
        manager = ConversationManager(record.owner, record.id, store=self.store, size=size, counter=self._counter,
                                      writer=self.writer, summary_chars=self.settings.summary_chars,
                                      max_tokens=self.settings.max_context_tokens,
                                      overhead=record.context_overhead)
        canvas = Canvas(record.owner, record.id, artifact, self.writer, history_epoch=lambda: manager.epoch)
        return manager, canvas

    def _remember(self, record: ConversationRecord, size: HistorySize,
                  artifact: ArtifactRecord | None) -> LiveConversation:
        live = LiveConversation(record, *self._parts(record, size, artifact), self.writer, self.store)
        if self.bus.shared:
            live.fanout = self.bus.publish
        live.on_idle = lambda: self._idle(live)
        self._live[record.id] = live
        return live

    async def _close_cut_turns(self, live: LiveConversation, cut: Cut) -> bool:
        """Closes the turns the store holds as running, if this instance owns the conversation
        or can take it (else their owner runs them, and they are followed); whether it did."""
        turns = await self.store.running_turns(live.id)
        if not turns:
            return False
        if not await self.own(live):
            live.follow([], running=True)
            return False
        for turn in await self.store.running_turns(live.id):  # as they are now that it is ours
            await close_cut_turn(live, self.store, turn, cut)
        return True

    # ---- ownership ----------------------------------------------------------------------------

    async def own(self, live: LiveConversation) -> bool:
        """Whether this instance owns the conversation, taking it when nobody does; its
        state is read again from the store when it changed hands."""
        return (await self._claim(live))[0]

    async def _claim(self, live: LiveConversation) -> tuple[bool, str | None]:
        # Its state is read again before anyone else here may use the lease.
        claim, holder = await self.ownership.claim(live.id, lambda: self._refresh(live))
        return claim is not Claim.TAKEN, holder

    async def _refresh(self, live: LiveConversation) -> None:
        """Takes what the store holds: another instance may have written since this one
        held the conversation."""
        loaded = await self._load(live.owner, live.id)
        if loaded is None:
            raise FrameRejected("not_found", "This conversation was deleted.")
        live.reload(loaded[0], *self._parts(*loaded))

    async def forward_job(self, live: LiveConversation, kind: str) -> bool:
        """Hands a background job that writes the conversation (its title) to the instance
        that owns it, and waits until it ran there: True. False when the owner is this
        instance (it held the conversation or has just taken it): run it here."""
        for _ in range(CLAIM_ATTEMPTS):
            owned, holder = await self._claim(live)
            if owned:
                return False
            if holder is None:
                await asyncio.sleep(CLAIM_RETRY)
                continue  # released meanwhile: take it
            if not self.bus.shared:
                return True  # another process owns it, out of reach: its next turn's end runs it there
            message = {"c": live.id, "u": live.owner, "job": kind}
            if (await self.ownership.forward(holder, message, timeout=JOB_TIMEOUT)).status != "not_owner":
                return True
            await asyncio.sleep(CLAIM_RETRY)  # it let the conversation go meanwhile: take it, or find who has it
        raise OwnerUnreachable(f"no instance took job {kind} of {live.id}")

    async def snapshot(self, live: LiveConversation) -> SessionFrame | None:
        """The `session` frame: from memory where the conversation is owned, else from the
        store as of its last committed frame. None if it was deleted meanwhile."""
        if not self.bus.shared or self.ownership.holds(live.id):
            frame = await live.snapshot(self.tools())
        else:
            await self.writer.flush()  # what this instance wrote (a conversation it just created, say)
            frame = await session_from_store(self.store, live.owner, live.id, self.tools(),
                                             self.settings.max_context_tokens)
        if frame is not None and self.settings.demo:
            frame.notice = DEMO_NOTICE
        return frame

    def _lease_lost(self, conversation_id: str) -> None:
        live = self._live.get(conversation_id)
        if live is not None and live.writes_lost():
            self._spawn(self._follow_instead(live), f"lease-lost:{conversation_id}")

    async def _follow_instead(self, live: LiveConversation) -> None:
        """Another instance owns the conversation now (`writes_lost` was called): what ran
        here stops (its writes are refused), and its sockets follow the new owner from what
        the store holds."""
        try:
            await live.stop()
            await self.writer.flush()
            loaded = await self._load(live.owner, live.id)
            if loaded is None:
                self._close_all(live, CLOSE_NOT_FOUND, ErrorFrame(conversation_id=live.id, code="not_found",
                                                                  message="This conversation was deleted."))
                return
            live.reload(loaded[0], *self._parts(*loaded))
            self.writer.reopen(live.id)
            live.follow([], running=bool(await self.store.running_turns(live.id)))
            live.catch_up()
        except Exception:
            log.exception("could not hand %s over to its new owner", live.id)
            self._evict(live)
        finally:
            live.recovered()

    async def _take_over(self, lease: Lease) -> None:
        """The lease's holder stopped renewing it (it died, or lost the database): the turn it
        ran is closed as interrupted here, and its clients, wherever they are, told."""
        turns = await self.store.running_turns(lease.conversation_id)
        if not turns:
            # Nothing was running (or it is an instance's own lease): free it, so that it is
            # not found expired again at every sweep.
            if (await self.ownership.claim(lease.conversation_id))[0] is Claim.GAINED:
                await self.ownership.release(lease.conversation_id)
            return
        turn = turns[0]
        live = self.live(turn.owner, turn.conversation_id) or await self.open(turn.owner, turn.conversation_id,
                                                                               cut=OWNER_LOST)
        if live is None:
            return
        if await self._close_cut_turns(live, OWNER_LOST) or not live.running:
            log.warning("took over %s from instance %s, whose lease expired", live.id, lease.instance)
        self.release(live)

    def _followed(self, conversation_id: str, frames: list[Frame], instance: str) -> None:
        """Frames another instance committed (the bus): for the sockets here."""
        live = self._live.get(conversation_id)
        if live is None or self.ownership.holds(conversation_id):
            return
        if any(kind == DELETED for _, _, kind, _ in frames):
            self._close_all(live, CLOSE_NOT_FOUND, ErrorFrame(conversation_id=live.id, code="not_found",
                                                              message="This conversation was deleted."))
            return
        live.follow(frames)
        self._owners[conversation_id] = instance

    def owner_of(self, conversation_id: str) -> str | None:
        """The instance whose frames the bus last brought for a followed conversation."""
        return self._owners.get(conversation_id)

    def _resync(self) -> None:
        for live in self._live.values():
            if not self.ownership.holds(live.id):
                live.catch_up()

    # ---- commands, wherever the conversation runs (`commands`) --------------------------------

    async def command(self, live: LiveConversation, frame: AnyClientFrame, *,
                      echo: bool = False) -> asyncio.Task[None] | None:
        """See `Commands.command`."""
        return await self.commands.command(live, frame, echo=echo)

    async def claim(self, live: LiveConversation) -> tuple[bool, str | None]:
        """Whether this instance owns the conversation (taking it when free), and else who does."""
        return await self._claim(live)

    # ---- writes the store lost ---------------------------------------------------------------

    def _writes_lost(self, scope: str) -> None:
        """The writer could not store some of `scope`'s ops and refuses its writes until
        whoever holds that scope's state in memory has brought it back in line."""
        live = self._live.get(scope)
        if live is None:
            self.writer.reopen(scope)  # nothing in memory builds on it (memories are read per use)
        elif live.writes_lost():
            self._spawn(self._writes_failed(live), f"bring-back:{scope}")

    async def _writes_failed(self, live: LiveConversation) -> None:
        """Lost writes: refused because another instance took the conversation (follow it
        now), or the store failed (bring it back in line)."""
        epoch = self.ownership.epoch(live.id)
        try:
            lease = await self.store.get_lease(live.id)
        except Exception:  # the store fails: bring it back, which tells the clients or evicts them
            await self._bring_back(live)
            return
        if epoch is not None and lease is not None and (lease.instance, lease.epoch) == (self.ownership.instance, epoch):
            await self._bring_back(live)
            return
        # Written without the lease (given back, or taken by another instance): follow its owner.
        self.ownership.forget(live.id)
        await self._follow_instead(live)

    async def _bring_back(self, live: LiveConversation) -> None:
        """Stops what ran, reloads the conversation from the store and tells its clients what
        failed; when even that cannot be stored, closes their sockets so that they reconnect
        and see what was kept (`session`, `resume`)."""
        try:
            stopped = await live.stop()
            if await self._reload(live, stopped):
                return
        except Exception:
            log.exception("could not bring %s back in line with the store", live.id)
        finally:
            live.recovered()
        self._evict(live)

    async def _reload(self, live: LiveConversation, stopped: str | None) -> bool:
        """Whether the conversation was reloaded and its clients told, all of it stored."""
        loaded = await self._load(live.owner, live.id)
        if loaded is None:
            return False  # deleted meanwhile
        live.reload(loaded[0], *self._parts(*loaded))
        self.writer.reopen(live.id)
        if not await self._close_cut_turns(live, NOT_SAVED):
            if stopped is None:
                live.publish(ErrorFrame(code="internal", message=CHANGE_NOT_SAVED))
            else:  # a message still being checked, or a turn whose start was lost
                live.publish(ErrorFrame(code="internal", message=NOT_SAVED.message))
                live.publish(Done(message_id=stopped, stop_reason="error"))
        await self.writer.flush()
        return not self.writer.lost(live.id)

    def _evict(self, live: LiveConversation) -> None:
        """Forgets the conversation (the next `open` loads it, closing a cut turn) and closes
        its sockets with an `error` that has no seq, since none could be stored."""
        self._close_all(live, CLOSE_INTERNAL, ErrorFrame(conversation_id=live.id, code="internal",
                                                         message=GONE_NOT_SAVED))
        self.writer.reopen(live.id)

    def _close_all(self, live: LiveConversation, code: int, frame: ErrorFrame) -> None:
        """Closes every socket on the conversation with `frame` and forgets it."""
        text = frame.to_json()
        for listener in tuple(live.listeners):
            listener.close(code, text)
        live.listeners.clear()
        if self._live.get(live.id) is live:
            del self._live[live.id]

    # ---- what clients ask for -------------------------------------------------------------

    def start_turn(self, live: LiveConversation, message: MessageIn) -> asyncio.Task[None] | None:
        """Starts a turn for a `message` frame: returns the task that checks the message and
        its attachments and then starts the turn (it raises FrameRejected to answer with an
        error), or None for a message already seen. The conversation is busy from this call
        on, so the frames after this one (an `abort`, another message) are read meanwhile."""
        if message.id is not None and live.knows_message(message.id):
            return None  # a client retrying a message it already sent: ignored, as PROTOCOL.md says
        unavailable = self.agent.model.unavailable(message.settings.model or self.settings.model)
        if unavailable is not None:  # no key for that model's provider: said before anything is stored
            raise FrameRejected("llm_error", unavailable)
        if live.running:
            raise FrameRejected("busy", "A turn is already running in this conversation; wait for done or abort it.")
        task = live.prepare(self._start_turn(live, message))
        task.add_done_callback(lambda _: self.release(live))
        return task

    async def _start_turn(self, live: LiveConversation, message: MessageIn) -> None:
        if message.id is not None and await self.store.has_client_message_id(live.owner, live.id, message.id):
            return
        turn, user, content = await self._preparer.prepare(live, message)
        await live.load()  # the last wait: from here on the turn starts without a pause
        if message.id is not None:
            live.remember_message(message.id)
        changes = live.canvas.changes
        task = live.start(self.agent, turn, user, content)
        task.add_done_callback(lambda done: self._turn_ended(live, done, live.canvas.changes != changes))

    def _turn_ended(self, live: LiveConversation, task: asyncio.Task[StopReason], artifact_changed: bool) -> None:
        stop: StopReason = "aborted" if task.cancelled() else task.result()
        try:
            self.jobs.after_turn(live, stop, artifact_changed)
        except Exception:
            log.exception("after-turn jobs failed")
        self.release(live)

    async def clear(self, live: LiveConversation) -> None:
        await live.abort()
        live.clear()

    async def select_version(self, live: LiveConversation, index: int) -> None:
        self._check_canvas_idle(live)
        canvas = live.canvas
        if canvas.current is None:
            raise FrameRejected("no_artifact", "This conversation has no artifact.")
        if not 1 <= index <= canvas.version_count:
            raise FrameRejected("not_found", f"The artifact has versions 1 to {canvas.version_count}.")
        await self.writer.flush()  # a version added a moment ago must be readable
        version = await self.store.get_artifact_version(live.owner, live.id, index)
        if version is None:
            raise FrameRejected("not_found", f"Version {index} of the artifact was not found.")
        canvas.select(index, version)

    def edit_artifact(self, live: LiveConversation, content: str, title: str | None) -> None:
        """The user's own edit in the canvas becomes a new version."""
        self._check_canvas_idle(live)
        current = live.canvas.current
        if current is None:
            raise FrameRejected("no_artifact", "This conversation has no artifact to edit.")
        live.canvas.add_version(type=current.type, title=title or current.title, language=current.language,
                                content=content, source="user")
        self.jobs.reflect_later(live)

    @staticmethod
    def _check_canvas_idle(live: LiveConversation) -> None:
        if live.running:
            raise FrameRejected("busy", "The agent is working on the artifact; wait for done or abort the turn.")

    async def delete(self, owner: str, conversation_id: str) -> bool:
        live = self.live(owner, conversation_id)
        if live is not None:
            await live.abort()
            self._close_all(live, CLOSE_NOT_FOUND, ErrorFrame(conversation_id=conversation_id, code="not_found",
                                                              message="This conversation was deleted."))
        elif await self.store.get_conversation(owner, conversation_id) is None:
            return False
        self.jobs.cancel(conversation_id)
        # Deleting wins over whoever owns it: not fenced by a lease (one given back keeps its
        # fence, which would refuse this). An owner elsewhere finds nothing left to write to.
        self.writer.unfence(conversation_id)
        await self.writer.commit([DeleteConversation(owner, conversation_id)])
        # Sockets on other instances learn it from the bus (an owner elsewhere stops its turn:
        # its next write finds nothing to write to).
        self.bus.publish(conversation_id, 0, None, DELETED, "")
        await self.ownership.release(conversation_id)
        return True

    # ---- process life -----------------------------------------------------------------------

    async def shutdown(self) -> None:
        """Aborts every running turn (each gets its `done`) and flushes the store."""
        await self.jobs.close()
        await asyncio.gather(*self._recoveries, return_exceptions=True)
        busy = [live for live in self._live.values() if live.running]
        await asyncio.gather(*(live.abort() for live in busy), return_exceptions=True)
        await self.writer.flush()

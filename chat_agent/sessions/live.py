"""A conversation while it is open here: its state in memory, its listeners, its event log,
and its running turn (`turn.RunningTurn`) or, when another instance owns it, the follower
of that owner (`follow.Follower`).

Frames get their `seq` in the event log here and go out only after the store writer
committed them, so whatever a client was told survives a crash, and every connection on
the conversation sees the same frames in the same order. With several instances, the owner
hands every committed frame to the bus as well.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import Callable, Protocol, Sequence, TypeVar

from chat_agent.canvas.artifact import Canvas
from chat_agent.context.conversation import ConversationManager
from chat_agent.protocol import (ContextCleared, ContextInfo, ContextUpdate, ErrorFrame, ReviewDecision, ServerFrame,
                                 SessionFrame,
                                 TitleFrame, ToolInfo, VisibleMessage)
from chat_agent.sessions.bus import Bus
from chat_agent.sessions.coalesce import DELTAS, DeltaCoalescer
from chat_agent.sessions.follow import UNKNOWN_TURN, Follower
from chat_agent.sessions.messages import Committed, Status
from chat_agent.sessions.pages import SESSION_BYTES, SESSION_MESSAGES, newest_within, visible_page
from chat_agent.sessions.plan import latest_plan
from chat_agent.sessions.turn import RunningTurn
from chat_agent.store import (AppendEvents, ConversationRecord, CreateConversation, EventRecord, HistoryPage, Op, PruneEvents,
                              RecordClientMessageId, SetTitle, StartTurn, Store, StoreWriter, TurnRecord)

KEEP_TURNS = 3  # turns whose frames stay in the event log for `resume`
# Seconds the model-facing history stays loaded after a turn: a conversation going on
# does not read its history back for every message, an idle one holds only its size.
KEEP_LOADED = 60.0
KEEP_CLIENT_IDS = 32  # client message ids remembered in memory (the store has them all)
CLOSE_INTERNAL = 1011  # the socket's state is not what the store holds: reconnect to see it
MISSED = "This connection missed frames that are no longer kept; reconnect to see the conversation as it is."
T = TypeVar("T")
log = logging.getLogger(__name__)


class Listener(Protocol):
    def deliver(self, seq: int | None, text: str) -> None: ...  # None: a frame outside the log (`status`)

    def close(self, code: int, text: str | None = None) -> None: ...


Idle = Callable[[str], None]  # told a conversation's turn is over and its history let go


class LiveConversation:
    def __init__(self, record: ConversationRecord, manager: ConversationManager, canvas: Canvas,
                 writer: StoreWriter, store: Store, bus: Bus, idle: Idle):
        self.id = record.id
        self.owner = record.owner
        self.title = record.title
        self.manager = manager
        self.canvas = canvas
        # In the order they came, so that every run tells them in the same order (a set would
        # follow their memory addresses; the simulation, tests/sim, replays a run from its seed).
        self.listeners: dict[Listener, None] = {}
        self._writer = writer
        self._store = store  # the visible history is read from it, page by page
        self._bus = bus  # committed frames and live status go to the other instances too
        self._idle = idle
        self._seq = record.last_seq
        self._shown = record.last_seq  # the newest seq handed to this instance's listeners
        self._shown_waiters: list[tuple[int, asyncio.Future[None]]] | None = None  # `shown_through`
        # Logged, not committed yet: (seq, text), oldest first; shown first if the store fails.
        self._uncommitted: deque[tuple[int, str]] = deque()
        self._deltas = DeltaCoalescer(self._log)
        # The turn whose first deltas were logged, and their kinds: a kind's first is urgent.
        self._streamed: tuple[str | None, set[str]] = (None, set())
        self.turn: RunningTurn | None = None  # the turn running here, preparing to or finishing
        # Turns that ended here since the state was loaded: their end may not be stored yet,
        # so the store may still say they run (`knows_turn`). None until one ends: an empty
        # deque is ~700 bytes, and most open conversations only sit there.
        self._ended: deque[str] | None = None
        self.follower: Follower | None = None  # while another instance owns the conversation
        self._turn_starts: list[int] = []  # first seqs of recent turns, for event retention
        # The newest client message ids seen while open, so that a retry is known at once;
        # bounded, since the store has them all (checked before a turn starts).
        self._client_ids: dict[str, None] = {}
        # Bumped whenever writes are lost: state shown before may not have been stored.
        self.generation = 0
        self._recovering = False  # being brought back in line with the store
        self._retired = False  # forgotten: nothing published here is logged any more (`retire`)
        self._recovery_waiters: list[asyncio.Future[None]] = []  # `until_recovered`
        self._unload: asyncio.TimerHandle | None = None
        # A new conversation is stored with its first message, not when a socket opens on it
        # (PROTOCOL 1.2): what creates it, until then.
        self.unstored: CreateConversation | None = None

    @property
    def seq(self) -> int:
        return self.follower.seq if self.follower is not None else self._seq

    @property
    def busy(self) -> bool:
        """A turn runs here (or is prepared, or finished), or the state is being reloaded:
        a command that changes the conversation must wait."""
        return self.turn is not None or self._recovering

    @property
    def running(self) -> bool:
        """A turn runs: here, or on the instance that owns the conversation."""
        return self.busy or (self.follower is not None and self.follower.running)

    # ---- the event log ----------------------------------------------------------------------

    def publish(self, frame: ServerFrame, ops: Sequence[Op] = ()) -> None:
        """Gives the frame its seq, logs it (as part of the running turn, if any), and hands
        it to every listener once committed. Streamed deltas are merged for a few ms first
        (see `coalesce`); any other frame sends the held one before itself."""
        if isinstance(frame, DELTAS) and not ops:
            self._deltas.offer(frame)
            return
        self._deltas.interrupt()
        self._log(frame, ops)

    def flush_deltas(self) -> None:
        self._deltas.interrupt()

    def retire(self) -> None:
        """Forgotten (its sockets closed, `Registry.close_all`): a copy loaded anew takes over,
        and what is still published here (a command that was waiting on the store, say) is
        dropped. Its seqs are stale: stored, such a frame would leave a gap in the log and
        take a seq the new copy gives too."""
        self._retired = True

    def _log(self, frame: ServerFrame, ops: Sequence[Op] = ()) -> None:
        if self._retired:
            log.info("dropped a %s frame of %s published after it was let go", frame.type, self.id)
            return
        self.store_now()  # a frame of its log: the conversation exists from now on
        self._seq += 1
        seq = self._seq
        frame.conversation_id = self.id
        frame.seq = seq
        # A frame belongs to the turn once the turn began (its start is stored with or before
        # the frame): one still being prepared may never begin, and an instance following this
        # one would wait for its `done` forever.
        turn = self.turn if self.turn is not None and self.turn.shown else None
        if turn is not None:
            turn.numbered(frame)
        text, turn_id, kind = frame.to_json(), turn.id if turn is not None else None, frame.type
        event = EventRecord(conversation_id=self.id, seq=seq, type=kind, turn_id=turn_id, frame=text)
        self._uncommitted.append((seq, text))
        self._writer.submit([*ops, AppendEvents(self.owner, self.id, (event,))],
                            lambda: self._committed((seq, turn_id, kind, text)), urgent=self._urgent(frame, turn_id))
        if self._writer.unavailable:
            self.show_uncommitted()

    def _urgent(self, frame: ServerFrame, turn_id: str | None) -> bool:
        """Whether a person waits on the frame (the writer commits it ahead of other
        conversations' bulk rows): everything but streamed deltas, and the first delta of each
        kind in a turn (its first text)."""
        if not isinstance(frame, DELTAS):
            return True
        turn, kinds = self._streamed
        if turn != turn_id:
            self._streamed = turn, kinds = turn_id, set()
        if frame.type in kinds:
            return False
        kinds.add(frame.type)
        return True

    def _committed(self, frame: Committed) -> None:
        seq = frame[0]
        while self._uncommitted and self._uncommitted[0][0] <= seq:
            self._uncommitted.popleft()
        if seq > self._shown:
            self._shown = seq
            self.deliver(seq, frame[3])
            if self._shown_waiters:
                self._wake_shown()
        self._bus.publish(self.id, frame)

    async def shown_through(self, seq: int, timeout: float) -> None:
        """Returns once frame `seq` was stored and handed to the listeners here, or after
        `timeout` seconds (a store that does not answer)."""
        if self._shown >= seq:
            return
        future = asyncio.get_running_loop().create_future()
        if self._shown_waiters is None:
            self._shown_waiters = []
        self._shown_waiters.append((seq, future))
        await asyncio.wait([future], timeout=timeout)

    def _wake_shown(self) -> None:
        waiting = []
        for seq, future in self._shown_waiters or ():
            if future.done():
                continue  # its wait timed out
            if seq <= self._shown:
                future.set_result(None)
            else:
                waiting.append((seq, future))
        self._shown_waiters = waiting or None

    def show_uncommitted(self) -> None:
        """The store is unavailable: what was logged goes out now, in seq order, not once it
        is stored (it is, in that order, when the store is back). Not what the store will
        refuse (the conversation's writes are lost: its lease went to another instance)."""
        if self._writer.lost(self.id):
            return
        for seq, text in self._uncommitted:
            if seq > self._shown:
                self._shown = seq
                self.deliver(seq, text)

    @property
    def unsaved(self) -> bool:
        """Whether listeners here were shown frames the store does not hold yet."""
        return bool(self._uncommitted) and self._shown >= self._uncommitted[0][0]

    def deliver(self, seq: int | None, text: str) -> None:
        for listener in tuple(self.listeners):
            listener.deliver(seq, text)

    def notify(self, frame: ServerFrame) -> None:
        """Tells every listener of the conversation, here and on other instances, a frame that
        is not part of the log (PROTOCOL 1.2 `status`): at once, without a seq, never stored,
        so never replayed."""
        if self._writer.lost(self.id):
            return  # its writes are refused (another instance took it): what runs here is doomed
        frame.conversation_id = self.id
        text = frame.to_json()
        self.deliver(None, text)
        self._bus.broadcast(Status(conversation=self.id, turn=self.turn.id if self.turn is not None else None,
                                   seq=self._seq, text=text))

    def owners_status(self, turn: str | None, seq: int | None, text: str) -> None:
        """A `status` that the owner, another instance, told of its turn `turn` when the newest
        seq it had logged was `seq`. Not shown after that turn's end: it may overtake frames on
        the bus, or come after a `done` this instance read from the store. A turn still waiting
        for the model may have sent no frame here yet (no follower then): its status is shown.
        Nor while the conversation is brought back in line (see `writes_lost`)."""
        if turn is None or self._recovering or (seq is not None and self.seq > seq):
            return
        if self.follower is None or self.follower.shows_status(turn):
            self.deliver(None, text)

    def set_title(self, title: str) -> None:
        self.title = title
        self.publish(TitleFrame(title=title), ops=[SetTitle(self.owner, self.id, title)])

    def announce_canvas(self) -> None:
        """Tells clients of what a command (not a turn) changed of the canvas."""
        for frame in self.canvas.announcements():
            self.publish(frame)

    def clear(self) -> None:
        """Forgets the model-facing history (the visible one stays); only between turns."""
        self.manager.clear()
        self.publish(ContextCleared())
        self.publish(ContextUpdate(tokens=self.manager.tokens, max_tokens=self.manager.max_tokens))

    def store_now(self) -> None:
        """Stores a new conversation (before its first message and what that message links)."""
        if self.unstored is not None:
            self._writer.submit([self.unstored])
            self.unstored = None

    # ---- the turn ---------------------------------------------------------------------------

    def knows_message(self, client_id: str) -> bool:
        return client_id in self._client_ids

    def remember_message(self, client_id: str) -> None:
        self._client_ids[client_id] = None
        while len(self._client_ids) > KEEP_CLIENT_IDS:
            del self._client_ids[next(iter(self._client_ids))]
        self._writer.submit([RecordClientMessageId(self.owner, self.id, client_id)])

    def begin(self, turn: RunningTurn) -> None:
        """The conversation is busy with this turn from now on (it may still be preparing)."""
        assert self.turn is None, "a conversation runs one turn at a time"
        self.turn = turn

    async def load(self) -> None:
        """Loads what a turn needs that an idle conversation does not hold: the model-facing
        history (let go a while after the turn is over)."""
        if self._unload is not None:
            self._unload.cancel()
            self._unload = None
        await self.manager.load()

    def open_turn(self, turn: RunningTurn, user: VisibleMessage | None, content: list[dict],
                  spec: dict | None = None) -> None:
        """Stores the turn's start and adds the user's message to both histories (a regenerated
        reply has none: it answers the message the active path ends at)."""
        first_seq = self._seq + 1
        if user is not None:
            self.manager.add_visible(user)
            item = self.manager.add_user(content)
        else:
            item = self.manager.tail_id()
        turn.reply.parent_id = self.manager.leaf
        self.manager.begin_reply(turn.message_id)
        if spec is not None and item is not None:  # a continuation checks the history it finds holds it
            spec = {**spec, "user_item": item}
        ops: list[Op] = [StartTurn(TurnRecord(id=turn.id, conversation_id=self.id, owner=self.owner,
                                              message_id=turn.message_id, status="running",
                                              started_at=turn.reply.created_at, first_seq=first_seq, spec=spec))]
        self._turn_starts.append(first_seq)
        if len(self._turn_starts) > KEEP_TURNS:
            ops.append(PruneEvents(self.owner, self.id, self._turn_starts.pop(0)))
        self._writer.submit(ops)

    def submit(self, ops: Sequence[Op]) -> None:
        """Stores ops of the conversation's that no frame carries."""
        self._writer.submit(list(ops))

    def adopt_turn(self, turn: RunningTurn) -> None:
        """A turn cut off elsewhere, taken over to be closed here."""
        assert self.turn is None, "a conversation runs one turn at a time"
        self.turn = turn
        if turn.reply.parent_id is None:
            turn.reply.parent_id = self.manager.leaf
        self.manager.begin_reply(turn.message_id)

    def knows_turn(self, turn_id: str) -> bool:
        """Whether a turn the store holds as running is not cut off at all: it runs here, or
        it ended here and its end is on its way to the store."""
        return (self.turn is not None and self.turn.id == turn_id) or turn_id in (self._ended or ())

    def turn_over(self, turn: RunningTurn) -> None:
        """The turn is done: the conversation takes new ones, and lets its history go unless
        a turn follows soon."""
        if self.turn is not turn:
            return
        self.turn = None
        if self._ended is None:
            self._ended = deque(maxlen=KEEP_TURNS)
        self._ended.append(turn.id)
        if self._unload is not None:
            self._unload.cancel()
        self._unload = asyncio.get_running_loop().call_later(KEEP_LOADED, self._let_go)

    def _let_go(self) -> None:
        self._unload = None
        if not self.busy:
            self.manager.release()
            self._idle(self.id)

    def decide_review(self, review_id: str, decision: ReviewDecision, message: str | None) -> bool:
        """The user's decision on a failed review of the running turn; False when none waits
        under that id."""
        return self.turn is not None and self.turn.decide_review(review_id, decision, message)

    def approve(self, tool_id: str, approved: bool, message: str | None) -> bool:
        """The user's answer to an approval request of the running turn; False when no call
        waits under that id (unknown, answered already, timed out)."""
        return self.turn is not None and self.turn.approve(tool_id, approved, message)

    def answer_call(self, tool_id: str, content: str, is_error: bool) -> bool:
        """The result of a call to one of the client's tools, which the running turn waits for;
        False when no call waits under that id."""
        return self.turn is not None and self.turn.answer_call(tool_id, content, is_error)

    async def abort(self) -> None:
        """Stops the running turn (or its preparation) and returns once `done` is published."""
        if self.turn is not None:
            await self.turn.abort()

    # ---- faults -------------------------------------------------------------------------------

    def writes_lost(self) -> bool:
        """What this conversation wrote was lost, or it is not its to write any more: state
        shown may not be stored. True when the caller is to bring it back in line, False
        when that is under way already; busy until `recovered`."""
        self.generation += 1
        if self._recovering:
            return False
        self._recovering = True
        return True

    @property
    def recovering(self) -> bool:
        """Being brought back in line with the store (see `writes_lost`)."""
        return self._recovering

    def recovered(self) -> None:
        self._recovering = False
        waiters, self._recovery_waiters = self._recovery_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    async def until_recovered(self) -> None:
        """Returns once the conversation is not being brought back in line with the store: a
        turn being stopped or a cut one not closed yet, its state in memory is neither what
        it was nor what the store holds (a `session` taken then would show neither)."""
        while self._recovering:
            waiter = asyncio.get_running_loop().create_future()
            self._recovery_waiters.append(waiter)
            await waiter

    # ---- following another instance, and taking the conversation back ------------------------

    def follow(self, running: bool) -> Follower:
        """Another instance owns the conversation: its frames are followed from here on, after
        the last one this instance's listeners were given."""
        if self.follower is None:
            self.follower = Follower(self.owner, self.id, self._store, self.deliver, self._shown, running=running,
                                     missed=self.missed)
        elif running and not self.follower.running:
            self.follower.turn = UNKNOWN_TURN
        return self.follower

    def reload(self, record: ConversationRecord, manager: ConversationManager, canvas: Canvas) -> None:
        """Takes the state the store holds, so what clients are told next follows what was
        stored (its seqs continue from the last stored one). The stored frames this
        instance's listeners were not given (another instance's, or a commit whose answer
        was lost) are theirs next: `deliver_stored`."""
        delivered = self.follower.seq if self.follower is not None else self._shown
        self.title = record.title
        self.manager = manager
        self.canvas = canvas
        self._seq = record.last_seq
        self._shown = min(delivered, record.last_seq)
        self._uncommitted.clear()
        self._turn_starts = [seq for seq in self._turn_starts if seq <= self._seq]
        self._client_ids.clear()
        self._ended = None  # what ran here and was not stored is cut off now: the store says so
        if self.follower is not None:
            self.follower.stop()
            self.follower = None

    async def deliver_stored(self) -> bool:
        """Gives this instance's listeners the stored frames they were not given, in seq order,
        up to the last stored one (see `reload`); before anything new is published. False
        when some of them are not in the log any more (pruned): they cannot be caught up."""
        last = self._seq
        if self._shown >= last:
            return True
        for event in await self._store.events_after(self.owner, self.id, self._shown):
            if event.seq > last or event.seq > self._shown + 1:
                break
            if event.seq == self._shown + 1:
                self._shown = event.seq
                self.deliver(event.seq, event.frame)
        caught_up, self._shown = self._shown == last, last
        return caught_up

    def missed(self) -> None:
        """Frames this instance's listeners did not get are gone from the log (pruned): they
        cannot be caught up, so they start over from a `session` (the conversation stays)."""
        self.close_listeners(CLOSE_INTERNAL, ErrorFrame(conversation_id=self.id, code="internal",
                                                        message=MISSED).to_json())

    def close_listeners(self, code: int, text: str | None) -> None:
        """Closes every socket on the conversation here (they reconnect, and start over)."""
        for listener in tuple(self.listeners):
            listener.close(code, text)
        self.listeners.clear()

    # ---- what a new listener is shown ---------------------------------------------------------

    def reply(self) -> VisibleMessage | None:
        """The running turn's reply as streamed so far (a copy), None between turns."""
        turn = self.turn
        return turn.snapshot_reply() if turn is not None and turn.shown else None

    async def page(self, before: str | None, limit: int) -> tuple[list[VisibleMessage], str | None] | None:
        """At most `limit` messages of the visible history just before the message `before`
        (the newest ones when None, the running turn's reply last), oldest first, and the id
        of the oldest one when older ones exist (`moreBefore`). None for an unknown `before`.
        The running reply is in memory only: `before` may name it (what came before it)."""
        def capture() -> tuple[VisibleMessage | None, str | None, int]:
            reply = self.reply()
            if reply is not None and before == reply.id:
                return None, None, limit  # what came before the running reply: the stored tail
            if reply is not None and before is None:
                return reply, None, limit - 1
            return None, before, limit

        reply, page = await self._consistent(capture)
        return None if page is None else visible_page(page, reply)

    async def recent(self, limit: int) -> list[VisibleMessage]:
        """The newest `limit` messages of the visible history (a background job's reading)."""
        page = await self.page(None, limit)
        return page[0] if page is not None else []

    async def snapshot(self, tools: list[ToolInfo], *, shared: bool = False) -> SessionFrame | None:
        """The `session` frame: its seq, the running turn's reply and the newest messages of
        the visible history as they were at one moment, all of it committed (never state a
        crash could still take back). `shared`: other instances may write the conversation;
        None when one did since this one last held it (its memory is behind: an owner that
        lost its lease and does not know it yet), as the stored history already shows."""
        def capture() -> tuple[tuple[SessionFrame, VisibleMessage | None], None, int]:
            context = ContextInfo(tokens=self.manager.tokens, max_tokens=self.manager.max_tokens)
            approvals = self.turn.approvals.values() if self.turn is not None else ()
            reviews = self.turn.reviews.values() if self.turn is not None else ()
            frame = SessionFrame(conversation_id=self.id, seq=self._seq, title=self.title,
                                 artifact=self.canvas.state(), context=context, tools=tools, running=self.running,
                                 pending_approvals=[info.model_copy() for info in approvals],
                                 pending_reviews=[info.model_copy() for info in reviews],
                                 leaf_id=self.manager.leaf)
            reply = self.reply()
            return (frame, reply), None, SESSION_MESSAGES - (reply is not None)

        (frame, reply), page = await self._consistent(capture)
        if shared:
            record = await self._store.get_conversation(self.owner, self.id)
            if record is not None and record.last_seq > self._seq:
                return None
            if frame.running is False and await self._store.running_turns(self.id):
                return None  # a turn cut elsewhere, not yet taken up here: as the store shows it
        budget = SESSION_BYTES - (len(reply.model_dump_json()) if reply is not None else 0)
        frame.messages, frame.more_before = visible_page(newest_within(page or HistoryPage([], False), budget), reply)
        frame.plan = latest_plan(frame.messages)
        return frame

    async def _consistent(self, capture: Callable[[], tuple[T, str | None, int]]) -> tuple[T, HistoryPage | None]:
        """What `capture` takes from memory, and the page of the stored visible history it
        asks for (before, limit), as of one moment: the writer's queue up to that moment is
        committed before the page is read, and the read is done again if the visible history
        or the running turn changed meanwhile (twice a turn at most, so hardly ever)."""
        while True:
            manager, version, ticket, turn = self.manager, self.manager.visible_version, self._writer.ticket, self.turn
            captured, before, limit = capture()
            if self.unstored is not None:
                # Nothing of it is stored yet (a socket opened on a new conversation): no page
                # to read, and no wait for the writer and a read thread on every opening.
                return captured, HistoryPage([], False)
            await self._writer.wait_for(ticket)
            page = await self._store.history_page(self.owner, self.id, "visible", before, limit)
            # A turn taken up meanwhile (continued here) changes no history, and its reply
            # so far is in neither what was captured nor the page.
            if self.manager is manager and manager.visible_version == version and self.turn is turn:
                return captured, page

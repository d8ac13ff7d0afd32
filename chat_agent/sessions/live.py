"""A conversation while it is open: its state in memory, its event log, its listeners, and
its turn. It is the one owner of a turn's state: a turn is started, published to, finished
and aborted through its methods, and nothing else writes that state.

Frames get their `seq` here and go out only after the store writer committed them, so
whatever a client was told survives a crash, and every connection on the conversation
sees the same frames in the same order.

With several instances, only the one owning the conversation (see `ownership`) runs its
turns and writes it; it hands every committed frame to the bus as well (`fanout`). On the
other instances the same class follows: it delivers the frames the bus brings to its own
sockets, in seq order, reading what the bus lost from the event log.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from typing import Any, Awaitable, Callable, Protocol, Sequence, TypeVar

from chat_agent.agent.approval import ApprovalGate
from chat_agent.agent.loop import CANCELLED_RESULT, STOPPED_NOTE, Agent, Turn
from chat_agent.canvas.artifact import Canvas
from chat_agent.context.conversation import ConversationManager
from chat_agent.ids import new_id
from chat_agent.protocol import (ApprovalInfo, ContextCleared, ContextInfo, ContextUpdate, Done, ServerFrame, SessionFrame, StopReason, TitleFrame,
                                 ToolEnd, ToolInfo, ToolStart, Usage, VisibleMessage)
from chat_agent.sessions.coalesce import DELTAS, DeltaCoalescer
from chat_agent.sessions.fold import fold, open_tools, reply_status, status_for, track_approvals
from chat_agent.sessions.runner import drive
from chat_agent.sessions.pages import SESSION_BYTES, SESSION_MESSAGES, newest_within, visible_page
from chat_agent.store import (AppendEvents, ConversationRecord, EventRecord, FinishTurn, HistoryPage, Op, PruneEvents,
                              RecordClientMessageId, SetTitle, StartTurn, Store, StoreWriter, TurnRecord)

NOT_ANSWERED = "Not run: the turn was stopped before the user answered the approval request."
KEEP_TURNS = 3  # turns whose frames stay in the event log for `resume`
# Seconds the model-facing history stays loaded after a turn: a conversation going on
# does not read its history back for every message, an idle one holds only its size.
KEEP_LOADED = 60.0
KEEP_CLIENT_IDS = 32  # client message ids remembered in memory (the store has them all)
T = TypeVar("T")
log = logging.getLogger(__name__)
# A committed frame as the bus carries it: (seq, turn id, frame type, frame text).
Committed = tuple[int, "str | None", str, str]


class Listener(Protocol):
    def deliver(self, seq: int, text: str) -> None: ...

    def close(self, code: int, text: str | None = None) -> None: ...


class LiveConversation:
    def __init__(self, record: ConversationRecord, manager: ConversationManager, canvas: Canvas,
                 writer: StoreWriter, store: Store):
        self.id = record.id
        self.owner = record.owner
        self.title = record.title
        self._use(manager, canvas)
        self.listeners: set[Listener] = set()
        self._writer = writer
        self._store = store  # the visible history is read from it, page by page
        self._seq = record.last_seq
        self._deltas = DeltaCoalescer(self._log)
        # The turn, owned here alone. A message whose attachments are being checked has not
        # started its turn yet, but the conversation is busy and `abort` cancels it.
        self._preparing: asyncio.Task[Any] | None = None
        self._task: asyncio.Task[StopReason] | None = None
        self._turn_id: str | None = None
        self._reply: VisibleMessage | None = None  # the running turn's reply, as streamed so far
        self._tool_started: dict[str, float] = {}  # open tool cards: when each started
        self._approvals: dict[str, ApprovalInfo] = {}  # the turn's requests not answered yet
        self._gate: ApprovalGate | None = None  # where the running turn's calls wait for the user
        self._turn_starts: list[int] = []  # first seqs of recent turns, for event retention
        # The newest client message ids seen while open, so that a retry is known at once;
        # bounded, since the store has them all (checked before a turn starts).
        self._client_ids: dict[str, None] = {}
        # Bumped whenever writes are lost: state shown before may not have been stored.
        self.generation = 0
        self._recovering = False  # being brought back in line with the store
        self._unload: asyncio.TimerHandle | None = None
        # Told every committed frame (the bus, with several instances).
        self.fanout: Callable[[str, int, str | None, str, str], None] = lambda *frame: None
        # Told when the turn is over and the history let go: the conversation could go elsewhere.
        self.on_idle: Callable[[], None] = lambda: None
        # Following another instance's turn: frames not delivered yet, the gap being read, the turn.
        # Made when frames come (several instances) and dropped once drained: ~760 bytes.
        self._incoming: deque[Committed] | None = None
        self._gap: asyncio.Task[None] | None = None
        self._remote_turn: str | None = None

    def _use(self, manager: ConversationManager, canvas: Canvas) -> None:
        self.manager = manager
        self.canvas = canvas
        canvas.on_change = self.publish  # `artifact` or `artifact_edit`, as the canvas decides

    @property
    def seq(self) -> int:
        return self._seq

    @property
    def running(self) -> bool:
        """A turn runs here, or (followed) on the instance that owns the conversation."""
        return (self._task is not None or self._preparing is not None or self._recovering
                or self._remote_turn is not None)

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

    def _log(self, frame: ServerFrame, ops: Sequence[Op] = ()) -> None:
        self._seq += 1
        seq = self._seq
        frame.conversation_id = self.id
        frame.seq = seq
        if self._reply is not None:
            fold(self._reply, frame)
            self._track_tools(frame)
        text, turn_id, kind = frame.to_json(), self._turn_id, frame.type
        event = EventRecord(conversation_id=self.id, seq=seq, type=kind, turn_id=turn_id, frame=text)
        self._writer.submit([*ops, AppendEvents(self.owner, self.id, (event,))],
                            lambda: self._committed(seq, turn_id, kind, text))

    def _track_tools(self, frame: ServerFrame) -> None:
        track_approvals(self._approvals, frame)
        if isinstance(frame, ToolStart):
            self._tool_started[frame.tool_id] = time.monotonic()
        elif isinstance(frame, ToolEnd):
            self._tool_started.pop(frame.tool_id, None)

    def _committed(self, seq: int, turn_id: str | None, kind: str, text: str) -> None:
        self._deliver(seq, text)
        self.fanout(self.id, seq, turn_id, kind, text)

    def _deliver(self, seq: int, text: str) -> None:
        for listener in tuple(self.listeners):
            listener.deliver(seq, text)

    def set_title(self, title: str) -> None:
        self.title = title
        self.publish(TitleFrame(title=title), ops=[SetTitle(self.owner, self.id, title)])

    # ---- the turn ---------------------------------------------------------------------------

    def knows_message(self, client_id: str) -> bool:
        return client_id in self._client_ids

    def remember_message(self, client_id: str) -> None:
        self._client_ids[client_id] = None
        while len(self._client_ids) > KEEP_CLIENT_IDS:
            del self._client_ids[next(iter(self._client_ids))]
        self._writer.submit([RecordClientMessageId(self.owner, self.id, client_id)])

    def prepare(self, preparation: Awaitable[Any]) -> asyncio.Task[Any]:
        """Runs a message's preparation (checking its attachments, then `start`): the
        conversation is busy meanwhile, and `abort` cancels it, answered by `done`."""
        async def prepare() -> Any:
            try:
                return await preparation
            except asyncio.CancelledError:
                # Aborted before its turn began: nothing of it is kept, and `done` says so.
                self.publish(Done(message_id=new_id("msg"), stop_reason="aborted", usage=Usage()))
                raise
            finally:
                self._preparing = None

        task = asyncio.get_running_loop().create_task(prepare(), name=f"prepare:{self.id}")
        self._preparing = task
        return task

    async def load(self) -> None:
        """Loads what a turn needs that an idle conversation does not hold: the model-facing
        history (let go a while after the turn is closed)."""
        if self._unload is not None:
            self._unload.cancel()
            self._unload = None
        await self.manager.load()

    def start(self, agent: Agent, turn: Turn, user: VisibleMessage, content: list[dict]) -> asyncio.Task[StopReason]:
        """Adds the user's message to both histories and runs the turn as a task of the
        conversation (not of any socket); its result is the stop reason. `load` first."""
        self._open(new_id("turn"), new_id("msg"), time.time())
        self.manager.add_visible(user)
        self.manager.add_user(content)
        task = asyncio.get_running_loop().create_task(self._run(agent, turn, self._reply.id), name=f"turn:{self.id}")
        task.add_done_callback(lambda done: self._ended(done, turn.usage))
        self._task = task
        self._gate = turn.approvals
        return task

    def approve(self, tool_id: str, approved: bool, message: str | None) -> bool:
        """The user's answer to an approval request of the running turn; False when no call
        waits under that id (unknown, answered already, timed out)."""
        return self._gate is not None and tool_id in self._approvals and self._gate.answer(tool_id, approved, message)

    def _open(self, turn_id: str, message_id: str, now: float) -> None:
        first_seq = self._seq + 1
        ops: list[Op] = [StartTurn(TurnRecord(id=turn_id, conversation_id=self.id, owner=self.owner,
                                              message_id=message_id, status="running", started_at=now,
                                              first_seq=first_seq))]
        self._turn_starts.append(first_seq)
        if len(self._turn_starts) > KEEP_TURNS:
            ops.append(PruneEvents(self.owner, self.id, self._turn_starts.pop(0)))
        self._writer.submit(ops)
        self._turn_id = turn_id
        self._reply = VisibleMessage(id=message_id, role="assistant", created_at=now, status="streaming")

    async def _run(self, agent: Agent, turn: Turn, message_id: str) -> StopReason:
        stop = await drive(agent, self.manager, turn, message_id, self.publish, self._turn_id)  # turn id: for its span
        self._close(stop, turn.usage, turn.detail)
        return stop

    def _ended(self, task: asyncio.Task[StopReason], usage: Usage) -> None:
        # A task cancelled before its first step never ran `_run`: close its turn here.
        if self._task is task:
            self._close("aborted", usage)

    def _close(self, stop: StopReason, usage: Usage, detail: str | None = None) -> None:
        self._task = None
        if stop in ("aborted", "error"):
            # The loop keeps the history valid itself; this covers a stop it never saw
            # (e.g. between steps) and does nothing when the history already ends well.
            self.manager.repair("", STOPPED_NOTE, CANCELLED_RESULT)
        self.finish(stop, usage, detail=detail)

    def adopt(self, record: TurnRecord, reply: VisibleMessage, pending: dict[str, ApprovalInfo] | None = None) -> None:
        """Takes over a turn that a crashed process left running, with its reply as the event
        log shows it, so that `finish` can close it."""
        self._turn_id = record.id
        self._reply = reply
        now = time.monotonic()
        self._tool_started = {call.tool_id: now for call in open_tools(reply)}
        self._approvals = dict(pending or {})

    def finish(self, stop: StopReason, usage: Usage, *, status: str | None = None, detail: str | None = None) -> None:
        """Closes open tool cards, stores the reply and publishes `done`. Synchronous, so
        nothing can interleave between the reply leaving the turn and the history."""
        reply = self._reply
        assert reply is not None and self._turn_id is not None, "finish() without a turn"
        # Text still held by the coalescer goes out (and into `reply`) before the reply is
        # stored: else an aborted reply would be stored without the last piece its clients
        # get just before `done`.
        self._deltas.interrupt()
        now = time.monotonic()
        for call in open_tools(reply):
            started = self._tool_started.get(call.tool_id, now)
            output = NOT_ANSWERED if call.tool_id in self._approvals else "Cancelled before it finished."
            self.publish(ToolEnd(tool_id=call.tool_id, name=call.name, output=output,
                                 duration=round(now - started, 3), is_error=True))
        reply.status = status or reply_status(stop)
        status = status or status_for(stop)
        self.manager.replace_visible(reply)
        finish = FinishTurn(self.owner, self.id, self._turn_id, status, stop, usage.model_dump(by_alias=True),
                            time.time())
        self.publish(Done(message_id=reply.id, stop_reason=stop, usage=usage, detail=detail), [finish])
        self._reply = None
        self._turn_id = None
        self._tool_started.clear()
        self._approvals.clear()
        self._gate = None
        # Idle again: the model-facing history is in the store, and let go unless a turn follows soon.
        self._unload = asyncio.get_running_loop().call_later(KEEP_LOADED, self._let_go)

    def _let_go(self) -> None:
        self._unload = None
        if not self.running:
            self.manager.release()
            self.on_idle()

    def clear(self) -> None:
        """Forgets the model-facing history (the visible one stays); only between turns."""
        self.manager.clear()
        self.publish(ContextCleared())
        self.publish(ContextUpdate(tokens=self.manager.tokens, max_tokens=self.manager.max_tokens))

    # ---- writes the store lost --------------------------------------------------------------

    def writes_lost(self) -> bool:
        """The store lost some of this conversation's writes (the writer refuses more until it
        is reloaded). True when the caller is to bring it back, False when that is under way."""
        self.generation += 1
        if self._recovering:
            return False
        self._recovering = True
        return True

    async def stop(self) -> str | None:
        """Stops what runs (what it still writes is refused); the id of the reply it was
        writing (a fresh one for a message still being checked), None if nothing ran."""
        if self._task is None and self._preparing is None:
            return None
        message_id = self._reply.id if self._reply is not None else new_id("msg")
        await self.abort()
        return message_id

    def reload(self, record: ConversationRecord, manager: ConversationManager, canvas: Canvas) -> None:
        """Takes the state the store holds, so what clients are told next follows what was
        stored (its seqs continue from the last stored one)."""
        self.title = record.title
        self._use(manager, canvas)
        self._seq = record.last_seq
        self._turn_starts = [seq for seq in self._turn_starts if seq <= self._seq]
        self._client_ids.clear()
        self._incoming = None
        self._remote_turn = None

    def recovered(self) -> None:
        self._recovering = False

    async def abort(self) -> None:
        """Stops what runs (the preparation or the turn) and returns once `done` is published."""
        task = self._preparing or self._task
        if task is not None and not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    # ---- following the owner on another instance ----------------------------------------------

    def follow(self, frames: list[Committed], running: bool | None = None) -> None:
        """Frames the owner (another instance) committed, as the bus brings them: delivered
        to this instance's sockets in seq order, a gap filled from the event log first.
        `running`: whether the owner runs a turn, when known otherwise (on opening)."""
        if running is not None:
            self._remote_turn = "?" if running else None
        if self._incoming is None:
            self._incoming = deque()
        self._incoming.extend(frames)
        if self._gap is None:
            self._drain()

    def catch_up(self) -> None:
        """Reads what the bus may have lost (it reconnected) from the event log."""
        if self._gap is None:
            self._gap = asyncio.get_running_loop().create_task(self._read_gap(), name=f"catch-up:{self.id}")

    def _drain(self) -> None:
        while self._incoming:
            seq, turn_id, kind, text = self._incoming[0]
            if seq > self._seq + 1:
                self.catch_up()
                return
            self._incoming.popleft()
            if seq == self._seq + 1:
                self._follow_one(seq, turn_id, kind, text)
        self._incoming = None

    def _follow_one(self, seq: int, turn_id: str | None, kind: str, text: str) -> None:
        self._seq = seq
        if kind == "done":
            self._remote_turn = None
        elif turn_id is not None:
            self._remote_turn = turn_id
        self._deliver(seq, text)

    async def _read_gap(self) -> None:
        try:
            for event in await self._store.events_after(self.owner, self.id, self._seq):
                if event.seq == self._seq + 1:
                    self._follow_one(event.seq, event.turn_id, event.type, event.frame)
        except Exception:
            log.exception("could not read the frames of %s the bus missed", self.id)
        finally:
            self._gap = None
        if self._incoming and self._incoming[0][0] > self._seq + 1:
            # Not in the log either (pruned, or not committed: the owner failed): go on from there.
            log.warning("%s: frames %d..%d are gone; going on", self.id, self._seq + 1, self._incoming[0][0] - 1)
            self._seq = self._incoming[0][0] - 1
        self._drain()

    # ---- what a new listener is shown ---------------------------------------------------------

    def reply(self) -> VisibleMessage | None:
        """The running turn's reply as streamed so far (a copy), None between turns."""
        return self._reply.model_copy(deep=True) if self._reply is not None else None

    async def page(self, before: str | None, limit: int) -> tuple[list[VisibleMessage], str | None] | None:
        """At most `limit` messages of the visible history just before the message `before`
        (the newest ones when None, the running turn's reply last), oldest first, and the id
        of the oldest one when older ones exist (`moreBefore`). None for an unknown `before`.
        The running reply is in memory only: `before` may name it (what came before it)."""
        def capture() -> tuple[VisibleMessage | None, str | None, int]:
            reply = self._reply
            if reply is not None and before == reply.id:
                return None, None, limit  # what came before the running reply: the stored tail
            if reply is not None and before is None:
                return self.reply(), None, limit - 1
            return None, before, limit

        reply, page = await self._consistent(capture)
        return None if page is None else visible_page(page, reply)

    async def recent(self, limit: int) -> list[VisibleMessage]:
        """The newest `limit` messages of the visible history (a background job's reading)."""
        page = await self.page(None, limit)
        return page[0] if page is not None else []

    async def snapshot(self, tools: list[ToolInfo]) -> SessionFrame:
        """The `session` frame: its seq, the running turn's reply and the newest messages of
        the visible history as they were at one moment, all of it committed (never state a
        crash could still take back)."""
        def capture() -> tuple[tuple[SessionFrame, VisibleMessage | None], None, int]:
            context = ContextInfo(tokens=self.manager.tokens, max_tokens=self.manager.max_tokens)
            frame = SessionFrame(conversation_id=self.id, seq=self._seq, title=self.title,
                                 artifact=self.canvas.state(), context=context, tools=tools, running=self.running,
                                 pending_approvals=[info.model_copy() for info in self._approvals.values()])
            reply = self.reply()
            return (frame, reply), None, SESSION_MESSAGES - (reply is not None)

        (frame, reply), page = await self._consistent(capture)
        budget = SESSION_BYTES - (len(reply.model_dump_json()) if reply is not None else 0)
        frame.messages, frame.more_before = visible_page(newest_within(page or HistoryPage([], False), budget), reply)
        return frame

    async def _consistent(self, capture: Callable[[], tuple[T, str | None, int]]) -> tuple[T, HistoryPage | None]:
        """What `capture` takes from memory, and the page of the stored visible history it
        asks for (before, limit), as of one moment: the writer's queue up to that moment is
        committed before the page is read, and the read is done again if the visible history
        changed meanwhile (twice a turn at most, so hardly ever)."""
        while True:
            manager, version, ticket = self.manager, self.manager.visible_version, self._writer.ticket
            captured, before, limit = capture()
            await self._writer.wait_for(ticket)
            page = await self._store.history_page(self.owner, self.id, "visible", before, limit)
            if self.manager is manager and manager.visible_version == version:
                return captured, page

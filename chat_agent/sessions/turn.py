"""A turn's life, from the `message` that asks for it to its `done`, owned by one object.

`RunningTurn` holds everything a turn has: its task (preparation, then the loop), the reply
as streamed so far, its open tool cards, the approvals it waits for, and its state. Its
frames are numbered, stored and delivered by its conversation's event log (`live`), which
folds each one into the reply as it numbers it; the turn is the only one that publishes
them, and once it is done nothing more of it is published.

A turn cut off elsewhere (its process died, its writes were lost) is adopted from the event
log to be closed here (`RunningTurn.adopt`), through the same `finish` as a running one.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from dataclasses import dataclass
from typing import Awaitable, Callable, Protocol, Sequence

from chat_agent import clock
from chat_agent.agent.loop import CANCELLED_RESULT, STOPPED_NOTE, Agent, Turn
from chat_agent.ids import new_id
from chat_agent.protocol import (ApprovalInfo, Done, ErrorFrame, ReviewDecided, ReviewDecision, ReviewInfo, ServerFrame,
                                 StopReason, ToolEnd, ToolStart, Usage, VisibleMessage)
from chat_agent.sessions.fold import fold, open_tools, reply_status, status_for, track_approvals, track_reviews
from chat_agent.sessions.runner import drive
from chat_agent.canvas.artifact import Canvas
from chat_agent.context.conversation import ConversationManager
from chat_agent.store import FinishTurn, Op, TurnRecord

log = logging.getLogger(__name__)

NOT_ANSWERED = "Not run: the turn was stopped before the user answered the approval request."


class TurnState(enum.Enum):
    PREPARING = "preparing"  # the message is checked, its attachments read; nothing stored yet
    STREAMING = "streaming"  # the model writes
    WAITING_TOOL = "waiting_tool"  # tools run
    WAITING_USER = "waiting_user"  # a call waits for the user's approval, or a review for their decision
    FINISHING = "finishing"  # open cards are closed, the reply stored, `done` published
    DONE = "done"


_NEXT: dict[TurnState, frozenset[TurnState]] = {
    TurnState.PREPARING: frozenset({TurnState.STREAMING, TurnState.FINISHING, TurnState.DONE}),
    TurnState.STREAMING: frozenset({TurnState.WAITING_TOOL, TurnState.WAITING_USER, TurnState.FINISHING}),
    TurnState.WAITING_TOOL: frozenset({TurnState.STREAMING, TurnState.WAITING_USER, TurnState.FINISHING}),
    TurnState.WAITING_USER: frozenset({TurnState.STREAMING, TurnState.WAITING_TOOL, TurnState.FINISHING}),
    TurnState.FINISHING: frozenset({TurnState.DONE}),
    TurnState.DONE: frozenset(),
}


@dataclass(frozen=True, slots=True)
class Prepared:
    """A message made ready to run: the loop's input, the user's message as the visible
    history keeps it, and its content as the model reads it."""

    turn: Turn
    user: VisibleMessage | None  # None: a regenerated reply, to the message the active path ends at
    content: list[dict]
    spec: dict | None = None  # stored with the turn, so that it can continue after a failure


@dataclass(frozen=True, slots=True)
class Outcome:
    stop: StopReason
    started: bool  # False: stopped (aborted) before it began, nothing of it stored
    artifact_changed: bool = False


Prepare = Callable[[], Awaitable[Prepared | None]]  # None: a message already answered, no turn


class LiveConversation(Protocol):
    """What a turn needs of its conversation (`live.LiveConversation`)."""

    id: str
    owner: str
    manager: ConversationManager
    canvas: Canvas

    def publish(self, frame: ServerFrame, ops: Sequence[Op] = ()) -> None: ...
    def notify(self, frame: ServerFrame) -> None: ...
    def flush_deltas(self) -> None: ...
    def open_turn(self, turn: RunningTurn, user: VisibleMessage | None, content: list[dict],
                  spec: dict | None = None) -> None: ...
    def adopt_turn(self, turn: RunningTurn) -> None: ...
    def turn_over(self, turn: RunningTurn) -> None: ...


class RunningTurn:
    """Start one with `RunningTurn.start`, or take one over from the log with `adopt`."""

    def __init__(self, conversation: LiveConversation, turn_id: str, message_id: str, started_at: float):
        self.conversation = conversation
        self.id = turn_id
        self.message_id = message_id
        self.state = TurnState.PREPARING
        self.reply = VisibleMessage(id=message_id, role="assistant", created_at=started_at, status="streaming")
        self._tool_started: dict[str, float] = {}  # open tool cards: when each started
        self.approvals: dict[str, ApprovalInfo] = {}  # requests not answered yet
        self.reviews: dict[str, ReviewInfo] = {}  # failed reviews waiting for the user's decision
        self._turn: Turn | None = None  # the loop's input, once prepared
        self._task: asyncio.Task[Outcome] | None = None
        self._failure: str | None = None  # why the server stopped it, for its `error` (see `fail`)

    # ---- a new turn -------------------------------------------------------------------------

    @classmethod
    def start(cls, conversation: LiveConversation, agent: Agent, prepare: Prepare) -> RunningTurn:
        """The turn a message asks for, running from now on: its preparation first (the
        conversation is busy meanwhile, and `abort` stops it), then the loop."""
        turn = cls(conversation, new_id("turn"), new_id("msg"), clock.now())
        turn._task = asyncio.get_running_loop().create_task(turn._life(agent, prepare),
                                                             name=f"turn:{conversation.id}")
        turn._task.add_done_callback(turn._ended)
        return turn

    @property
    def task(self) -> asyncio.Task[Outcome]:
        """Ends with the turn's outcome; raises what refused the message (FrameRejected)."""
        assert self._task is not None, "an adopted turn has no task"
        return self._task

    async def over(self) -> None:
        """Returns once the turn has run its course (at once for one closed without running)."""
        if self._task is not None:
            await asyncio.wait([self._task])

    async def _life(self, agent: Agent, prepare: Prepare) -> Outcome:
        try:
            prepared = await prepare()
        except asyncio.CancelledError:
            # Aborted before it began: nothing of it is kept, and `done` says so (`_ended`).
            return Outcome("aborted", started=False)
        except BaseException:
            self._to(TurnState.DONE)
            self.conversation.turn_over(self)
            raise
        if prepared is None:
            self._to(TurnState.DONE)
            self.conversation.turn_over(self)
            return Outcome("end_turn", started=False)
        return await self._run(agent, prepared)

    async def _run(self, agent: Agent, prepared: Prepared) -> Outcome:
        self._turn = prepared.turn
        changes = self.conversation.canvas.changes
        self.conversation.open_turn(self, prepared.user, prepared.content, prepared.spec)
        self._to(TurnState.STREAMING)
        return await self._drive(agent, prepared.turn, changes)

    async def _drive(self, agent: Agent, turn: Turn, changes: int, *, start: int | None = None,
                     rerun: list[dict] | None = None) -> Outcome:
        conversation = self.conversation
        stop, usage, detail = await drive(agent, conversation.manager, turn, self.message_id, self.emit,
                                          self.id, self._notify, start=start, rerun=rerun)
        if self._failure is not None:
            self.emit(ErrorFrame(code="internal", message=self._failure))
            stop = "error"
        if stop in ("aborted", "error") and conversation.manager.loaded:  # (not: reloaded meanwhile)
            # The loop keeps the history valid itself; this covers a stop it never saw
            # (e.g. between steps) and does nothing when the history already ends well.
            conversation.manager.repair("", STOPPED_NOTE, CANCELLED_RESULT)
        self.finish(stop, usage, detail=detail)
        return Outcome(stop, started=True, artifact_changed=conversation.canvas.changes != changes)

    # ---- taking over a cut turn -------------------------------------------------------------

    @classmethod
    def adopt(cls, conversation: LiveConversation, record: TurnRecord, reply: VisibleMessage,
              pending: dict[str, ApprovalInfo], reviews: dict[str, ReviewInfo] | None = None) -> RunningTurn:
        """A turn the store holds as running that nothing runs any more, with its reply as the
        event log shows it: to be closed (`finish`) by this instance."""
        turn = cls(conversation, record.id, record.message_id, record.started_at)
        turn.reply = reply
        now = asyncio.get_running_loop().time()
        turn._tool_started = {call.tool_id: now for call in open_tools(reply)}
        turn.approvals = dict(pending)
        turn.reviews = dict(reviews or {})
        turn.state = TurnState.STREAMING
        conversation.adopt_turn(turn)
        return turn

    def proceed(self, agent: Agent, turn: Turn, *, start: int, rerun: list[dict]) -> None:
        """An adopted turn goes on (sessions/continuation.py): the loop runs again from the
        history as mended, `rerun` first."""
        self._turn = turn
        self._task = asyncio.get_running_loop().create_task(
            self._drive(agent, turn, self.conversation.canvas.changes, start=start, rerun=rerun),
            name=f"turn:{self.conversation.id}")
        self._task.add_done_callback(self._ended)

    # ---- what the turn says -----------------------------------------------------------------

    def emit(self, frame: ServerFrame) -> None:
        """Publishes a frame of this turn; refused once it is done (a late event of a turn
        stopped meanwhile must never reach a client after its `done`)."""
        if self.state is TurnState.DONE:
            log.warning("%s: a %s frame of turn %s after its done was dropped", self.conversation.id, frame.type,
                        self.id)
            return
        self.conversation.publish(frame)

    def _notify(self, frame: ServerFrame) -> None:
        """A `status` of the turn, said at once (never after its `done`)."""
        if self.state is not TurnState.DONE:
            self.conversation.notify(frame)

    def numbered(self, frame: ServerFrame) -> None:
        """The conversation's log gave one of this turn's frames its seq: the reply and the
        open cards follow it (a `session` taken now shows exactly the frames up to it)."""
        fold(self.reply, frame)
        track_approvals(self.approvals, frame)
        track_reviews(self.reviews, frame)
        if isinstance(frame, ToolStart):
            self._tool_started[frame.tool_id] = asyncio.get_running_loop().time()
        elif isinstance(frame, ToolEnd):
            self._tool_started.pop(frame.tool_id, None)
        if self.state in (TurnState.STREAMING, TurnState.WAITING_TOOL, TurnState.WAITING_USER):
            self._to(TurnState.WAITING_USER if self.approvals or self.reviews else
                     TurnState.WAITING_TOOL if self._tool_started else TurnState.STREAMING)

    def approve(self, tool_id: str, approved: bool, message: str | None) -> bool:
        """The user's answer to an approval request; False when no call waits under that id."""
        return (self._turn is not None and tool_id in self.approvals
                and self._turn.approvals.answer(tool_id, approved, message))

    def answer_call(self, tool_id: str, content: str, is_error: bool) -> bool:
        """A client's result for a call to one of its tools; False when no call waits under that id."""
        return self._turn is not None and self._turn.client_calls.answer(tool_id, content, is_error)

    def decide_review(self, review_id: str, decision: ReviewDecision, message: str | None) -> bool:
        """The user's decision on a failed review; False when no review waits under that id."""
        policy = self._turn.review if self._turn is not None else None
        return policy is not None and review_id in self.reviews and policy.gate.answer(review_id, decision, message)

    @property
    def shown(self) -> bool:
        """Whether clients know of the reply (the turn began and is not over)."""
        return self.state not in (TurnState.PREPARING, TurnState.DONE)

    def snapshot_reply(self) -> VisibleMessage:
        return self.reply.model_copy(deep=True)

    # ---- the end ----------------------------------------------------------------------------

    async def abort(self) -> None:
        """Stops the turn and returns once its `done` is published."""
        task = self._task
        if task is not None and not task.done():
            if self._turn is not None:
                self._turn.tool_tasks.cancel()  # first: they unwind ahead of the turn (agent/tool_tasks.py)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    def _ended(self, task: asyncio.Task[Outcome]) -> None:
        """The task is over. Stopped before the turn began (aborted while it was prepared, or
        even before its first step), nothing of it is kept, and `done` says so: here, not in
        `abort`, whose caller may be gone by then (a socket that closed meanwhile)."""
        if self.state is TurnState.PREPARING:
            self._to(TurnState.DONE)
            self.conversation.turn_over(self)
            self.conversation.publish(Done(message_id=self.message_id, stop_reason="aborted", usage=Usage()))
        elif self.state is not TurnState.DONE and task.cancelled():
            # A continued turn stopped before its task took its first step: its body never ran.
            self.finish("aborted", Usage())

    async def fail(self, message: str) -> None:
        """Stops the turn for a reason of the server's (said in an `error`), as `abort` does."""
        if self._failure is None:
            self._failure = message
        await self.abort()

    def close_cut(self, message: str, status: str) -> None:
        """Ends a turn cut off elsewhere: an `error` saying why, then `done`."""
        self.emit(ErrorFrame(code="internal", message=message))
        self.finish("error", Usage(), status=status)

    def finish(self, stop: StopReason, usage: Usage, *, status: str | None = None, detail: str | None = None) -> None:
        """Closes open tool cards, stores the reply and publishes `done`. Synchronous, so
        nothing can interleave between the reply leaving the turn and the history."""
        conversation = self.conversation
        self._to(TurnState.FINISHING)
        # Text still held back for merging goes out (and into the reply) before the reply is
        # stored: else an aborted reply would lack the last piece its clients get.
        conversation.flush_deltas()
        now = asyncio.get_running_loop().time()
        for call in open_tools(self.reply):
            started = self._tool_started.get(call.tool_id, now)
            output = NOT_ANSWERED if call.tool_id in self.approvals else "Cancelled before it finished."
            self.emit(ToolEnd(tool_id=call.tool_id, name=call.name, output=output,
                              duration=round(now - started, 3), is_error=True))
        for info in list(self.reviews.values()):  # PROTOCOL 1.2: `abort` accepts (so does any other stop)
            self.emit(ReviewDecided(message_id=info.message_id, review_id=info.review_id, decision="accept",
                                    reason="aborted" if stop == "aborted" else "interrupted"))
        reply = self.reply
        reply.status = status or reply_status(stop)  # type: ignore[assignment]
        reply.artifact_index = conversation.canvas.current_index or None  # what a branch from here restores
        conversation.manager.replace_visible(reply)
        ops: list[Op] = [FinishTurn(conversation.owner, conversation.id, self.id, status or status_for(stop), stop,
                                    usage.model_dump(by_alias=True), clock.now())]
        done = Done(message_id=reply.id, stop_reason=stop, usage=usage, detail=detail)
        conversation.publish(done, ops)
        self._to(TurnState.DONE)
        self._tool_started.clear()
        self.approvals.clear()
        self.reviews.clear()
        conversation.turn_over(self)

    def _to(self, state: TurnState) -> None:
        if state is self.state:
            return
        if state not in _NEXT[self.state]:
            raise RuntimeError(f"turn {self.id}: no way from {self.state.value} to {state.value}")
        self.state = state

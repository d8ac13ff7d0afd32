"""A turn cut by a failure (its instance died, stopped, or lost its lease) goes on here,
from its last completed step, instead of being closed (PROTOCOL 1.2 "Turns continue after a
failure").

What a continuation starts from is what the store holds: the model-facing history (each
model reply and each set of tool results is stored as it completes), the turn's event log
(what its clients saw) and its spec (how to build the turn again). Where the failure struck:
- in a model call: the text its clients saw of that call is kept, and the call is made
  again with that text as the start of the reply (a prefill), so the model goes on after it;
- while tools ran: a call whose card was closed keeps the result its clients saw; a call
  still running is run again only if its tool is safe to repeat, and else ends as an error
  the model is told of;
- after the model's last reply: the turn only has to end.
A turn that fails again at the step it was continued at, or that has no spec (stored by a
release before this one), is closed as before (`cut.close_cut_turn`).
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass, field
from typing import Any

from chat_agent.agent.loop import Agent
from chat_agent.config import Settings
from chat_agent.protocol import ApprovalInfo, ContextUpdate, ReviewInfo, StatusFrame, ToolEnd, ToolStart, Usage, server_frames
from chat_agent.rejection import FrameRejected
from chat_agent.sessions.cut import Keep
from chat_agent.sessions.fold import open_tools
from chat_agent.sessions.live import LiveConversation
from chat_agent.sessions.ownership import Ownership
from chat_agent.sessions.prepare import TurnPreparer, TurnSpec
from chat_agent.sessions.replica import fold_reply
from chat_agent.sessions.turn import RunningTurn
from chat_agent.store import ContinueTurn, EventRecord, Store, StoreWriter, TurnRecord

log = logging.getLogger(__name__)

INTERRUPTED = "Interrupted by a server failure; not run again."
HANDOVER_DRAIN = 5.0  # seconds a stopping instance lets its turns end by themselves
RESUMING = "The server writing this reply stopped; another one goes on from where it was."


@dataclass(slots=True)
class _Log:
    """What a turn's events say about where it was cut."""

    steps: int = 0  # model calls whose reply reached the history (a `context_update` each)
    started: set[str] = field(default_factory=set)  # tool ids with a card
    ended: dict[str, ToolEnd] = field(default_factory=dict)


def _read(events: list[EventRecord], turn_id: str) -> _Log:
    seen = _Log()
    for event in events:
        if event.turn_id != turn_id or event.type not in ("context_update", "tool_start", "tool_end"):
            continue
        frame = server_frames.validate_json(event.frame)
        if isinstance(frame, ContextUpdate):
            seen.steps += 1
        elif isinstance(frame, ToolStart):
            seen.started.add(frame.tool_id)
        elif isinstance(frame, ToolEnd):
            seen.ended[frame.tool_id] = frame
    return seen


def _result(tool_id: str, text: str, is_error: bool) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": tool_id, "content": text or "(no output)"}
    if is_error:
        block["is_error"] = True
    return block


class Continuer:
    """Continues cut turns on this instance; built with what a new turn is built with."""

    def __init__(self, settings: Settings, agent: Agent, store: Store, preparer: TurnPreparer):
        self._settings = settings
        self._agent = agent
        self._store = store
        self._preparer = preparer

    def repeatable(self, name: str) -> bool:
        return self._agent.registry.repeatable(name) or name in self._settings.repeatable_tools

    async def resume(self, live: LiveConversation, record: TurnRecord, keep: Keep) -> RunningTurn | None:
        """The cut turn, running again here; None when it cannot go on (close it instead)."""
        if not self._settings.continue_turns or record.spec is None:
            return None
        generation = live.generation  # moves on if its state is brought back meanwhile
        try:
            spec = TurnSpec.model_validate(record.spec)
        except ValueError:
            log.warning("turn %s of %s has a spec this release cannot read; closing it", record.id, live.id)
            return None
        events = await self._store.events_after(record.owner, record.conversation_id, record.first_seq - 1)
        seen = _read(events, record.id)
        if record.continued_step is not None and record.continued_step >= seen.steps:
            log.warning("turn %s of %s failed again at step %d; closing it", record.id, live.id, seen.steps)
            return None
        pending: dict[str, ApprovalInfo] = {}
        reviews: dict[str, ReviewInfo] = {}  # a question the cut turn asked: accepted when it ends (`finish`)
        reply, streamed = fold_reply(record, events, pending=pending, reviews=reviews)
        await live.load()
        start = live.manager.position(spec.user_item) if spec.user_item is not None else None
        if start is None:  # its message never reached the store, or a summary has taken it
            log.warning("turn %s of %s: its message is not in the history; closing it", record.id, live.id)
            return None
        prefill = streamed.rstrip()  # the API refuses a prefill that ends in white space
        try:
            turn = await self._preparer.resume(live, spec, first_call=seen.steps == 0, thinking=not prefill)
        except FrameRejected as exc:
            log.warning("turn %s of %s cannot be built again (%s); closing it", record.id, live.id, exc.message)
            return None
        # The history may have been let go meanwhile (the turn this instance ran there ended
        # while the preparer read): loaded again, the last thing awaited.
        await live.load()
        start = live.manager.position(spec.user_item) if spec.user_item is not None else None
        # Checked after the reads, with nothing awaited from here on: a turn runs here now, or
        # another closer (a takeover and the opening it started, or another copy of the
        # conversation) got to it first.
        if (start is None or live.knows_turn(record.id) or live.turn is not None or live.generation != generation
                or not keep(live)):
            log.warning("turn %s of %s: taken up or brought back meanwhile; not continued here", record.id, live.id)
            return None
        running = RunningTurn.adopt(live, record, reply, pending, reviews)
        live.submit([ContinueTurn(record.owner, record.conversation_id, record.id, seen.steps)])
        rerun = self._mend(live, running, seen, prefill)
        if rerun is None:  # the model had finished: only the end was missing
            running.finish("end_turn", Usage())
            return running
        live.notify(StatusFrame(message_id=record.message_id, state="resuming", detail=RESUMING, elapsed=0.0))
        running.proceed(self._agent, turn, start=start, rerun=rerun)
        log.warning("continued turn %s of %s at step %d", record.id, live.id, seen.steps)
        return running

    def _mend(self, live: LiveConversation, running: RunningTurn, seen: _Log,
              prefill: str) -> list[dict[str, Any]] | None:
        """Makes the history ready for the next call: the calls to run again (maybe none), or
        None when the model's last reply ended the turn."""
        manager = live.manager
        last = manager.messages[-1]
        if last["role"] == "user":
            if prefill:
                manager.add_assistant([{"type": "text", "text": prefill}])
            return []
        calls = [b for b in last["content"] if isinstance(b, dict) and b.get("type") == "tool_use"]
        if not calls:
            return None
        open_ids = {call.tool_id for call in open_tools(running.reply)}
        results, rerun = [], []
        for call in calls:
            ended = seen.ended.get(call["id"])
            if ended is not None:  # it finished: its result is what its clients saw
                output = ended.output if isinstance(ended.output, str) else json.dumps(ended.output)
                results.append(_result(call["id"], output, ended.is_error))
                continue
            if call["id"] not in open_ids:  # its card never reached the store
                running.emit(ToolStart(message_id=running.message_id, tool_id=call["id"], name=call["name"],
                                       input=call["input"]))
            if call["id"] in running.approvals or self.repeatable(call["name"]):
                rerun.append(call)  # not run yet (waiting for the user), or safe to run again
            else:
                running.emit(ToolEnd(tool_id=call["id"], name=call["name"], output=INTERRUPTED, duration=0.0,
                                     is_error=True))
                results.append(_result(call["id"], INTERRUPTED, True))
        running.approvals.clear()  # asked again when their calls run again
        if results:
            manager.add_tool_results(results)
        return rerun



async def hand_over(conversations: list[LiveConversation], writer: StoreWriter, ownership: Ownership, *,
                    expire: bool) -> None:
    """A stopping instance (SIGTERM: a rolling restart, a drained node) leaves its running
    turns for another one to continue, as a dead one's are: turns that end within
    HANDOVER_DRAIN seconds end here; the others stop without storing anything more (no
    `done`). With other instances (`expire`) their leases are left to expire rather than given
    back, so that the first instance to find them expired continues them; alone, they are
    given back, and the instance started next continues them as it starts."""
    running = [live for live in conversations if live.turn is not None and live.turn.shown]
    if running:
        await asyncio.wait([asyncio.ensure_future(live.turn.over()) for live in running  # type: ignore[union-attr]
                            if live.turn is not None], timeout=HANDOVER_DRAIN)
    left = [live for live in running if live.turn is not None and ownership.holds(live.id)]
    for live in left:
        writer.hand_over(live.id)
        if expire:
            ownership.forget(live.id)
    await asyncio.gather(*(live.abort() for live in left), return_exceptions=True)
    if left:
        log.warning("handed %d running turn(s) over to the next instance", len(left))

"""The ReAct loop: call the model, run the tools it asks for, repeat.

An async generator of events with no I/O of its own besides the model client and the tool
registry. Abort is plain cancellation of whoever iterates it: whatever was streamed is kept
in the history and every tool_use gets its tool_result, so the next call is always valid.
"""

from __future__ import annotations

import asyncio
import logging
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Callable

from chat_agent.config import Settings
from chat_agent.context.conversation import ConversationManager
from chat_agent.agent.approval import ApprovalGate
from chat_agent.agent.client_calls import WAITING as CLIENT_WAITING
from chat_agent.agent.client_calls import ClientCalls
from chat_agent.agent.review import ReviewPolicy
from chat_agent.agent.tool_tasks import ToolTasks
from chat_agent.agent.events import (ApprovalRequested, ArtifactChanged, ArtifactDelta, Cited, ContextChanged, Event,
                                     ToolEnded, ToolProgressed, ToolStarted, TurnFailed, TurnFinished)
from chat_agent.model import CitationDelta, LLMError, ModelClient, ModelReply, ModelRequest, TextDelta, ToolInputDelta
from chat_agent.protocol import Usage
from chat_agent.agent.partial import FieldStream
from chat_agent.agent.waiting import watched
from chat_agent.context.prompting import cached_tools, with_breakpoint
from chat_agent.context.summary import SYSTEM_PROMPT as SUMMARY_PROMPT
from chat_agent.context.summary import window
from chat_agent.text import shorten
from chat_agent.tooling import ToolRegistry, ToolResult, ToolServices
from chat_agent.urgency import Urgency

log = logging.getLogger(__name__)

STOPPED_NOTE = "[The user stopped this reply here.]"
FAILED_NOTE = "[This reply was cut off by an error.]"
CANCELLED_RESULT = "Cancelled: the user stopped the turn before this tool finished."
INVALID_JSON_RESULT = ("Not run: the input of this call was not valid JSON. Write the call again with valid JSON. "
                       "What was written: {raw}")
INVALID_JSON_SHOWN = 2000  # characters of the broken JSON quoted back to the model
# Why a call in a reply that did not stop for tool use was not run, by the API's stop reason.
_NOT_RUN = {
    "max_tokens": "the model ran out of output tokens before it finished writing this call",
    "model_context_window_exceeded": "the conversation reached the model's context window before the model "
                                     "finished writing this call",
}
_STOP_REASONS = {"end_turn": "end_turn", "stop_sequence": "end_turn", "max_tokens": "max_tokens",
                 "model_context_window_exceeded": "max_tokens", "refusal": "refusal"}


@dataclass(slots=True)
class Agent:
    """What every turn shares: the model, the tools and the settings, and the urgent work
    its streams pause for."""

    model: ModelClient
    registry: ToolRegistry
    settings: Settings
    urgency: Urgency = field(default_factory=Urgency)

    async def summarize(self, transcript: str) -> str:
        return await self.model.complete(ModelRequest(
            model=self.settings.small_model, system=SUMMARY_PROMPT, max_tokens=2048,
            messages=[{"role": "user", "content": transcript}]))


@dataclass(frozen=True, slots=True)
class Turn:
    """What a turn asks of the loop, fixed before it starts; the loop keeps its own progress
    (`_Progress`) and reports it through its events."""

    owner: str
    conversation_id: str
    model: str
    system: str | list[dict[str, Any]]
    tools: list[dict[str, Any]]
    thinking: bool = False
    tool_choice: dict[str, Any] | None = None  # forced on the first call only (highlights, quick actions)
    # What that forced call is sent instead of the history (a highlight's span edit): the API
    # keys the message cache by tool_choice, so a forced call reads none of the history from it.
    focus: list[dict[str, Any]] | None = None
    window: int | None = None  # history messages before this turn the model sees (None: all)
    services: ToolServices = field(default_factory=ToolServices)  # what tools get in their context
    approvals: ApprovalGate = field(default_factory=ApprovalGate)  # calls that wait for the user
    client_calls: ClientCalls = field(default_factory=ClientCalls)  # tools the client runs (their schemas in `tools`)
    review: ReviewPolicy | None = None  # how what the turn makes is reviewed (`critic`); None: it is not
    tool_tasks: ToolTasks = field(default_factory=ToolTasks)  # its tool calls' tasks, which an abort cancels first


@dataclass(slots=True)
class _Progress:
    """A turn's state inside the loop, reported in `TurnFinished`."""

    start: int  # where this turn's messages begin in the history
    forced: dict[str, Any] | None  # the tool choice the next call is sent, if still forced
    usage: Usage = field(default_factory=Usage)
    # For `done.detail`: why the model stopped, when the API says (a refusal's explanation),
    # or what the provider could not do of what was asked (thinking on a model without it).
    detail: str | None = None


async def run_turn(agent: Agent, conv: ConversationManager, turn: Turn, *, start: int | None = None,
                   rerun: list[dict[str, Any]] | None = None) -> AsyncIterator[Event]:
    """Runs model calls and tools until the model stops; the caller already added the user message.
    A turn that continues after a failure gives where its messages `start` in the history,
    and the calls of its last reply to run again first (their cards are open already)."""
    progress = _Progress(start=len(conv.messages) - 1 if start is None else start, forced=turn.tool_choice)
    if rerun:
        async with aclosing(_run_tools(agent, conv, turn, rerun, {}, announce=False)) as tool_events:
            async for event in tool_events:
                yield event
    for _ in range(agent.settings.max_steps):
        if conv.needs_summary() and await _summarize(agent, conv):
            yield ContextChanged(conv.tokens, conv.max_tokens, summarized=True)
        reply: ModelReply | None = None
        async with aclosing(_model_call(agent, conv, turn, progress)) as stream:
            async for event in stream:
                if isinstance(event, ModelReply):
                    reply = event
                else:
                    yield event
        if reply is None:  # the call failed; _model_call already explained why
            yield TurnFinished("error", progress.usage, progress.detail)
            return
        progress.usage.add(reply.usage)
        if reply.notes and progress.detail is None:  # what the provider could not do (thinking), for `done`
            progress.detail = " ".join(reply.notes)
        if reply.stop_reason == "refusal":
            # A refused exchange sent again invites more refusals: the model never sees it again.
            conv.forget_exchange()
            yield ContextChanged(conv.tokens, conv.max_tokens, usage=progress.usage)
            yield TurnFinished("refusal", progress.usage, reply.stop_detail)
            return
        calls, unfinished = _keep_reply(conv, reply)
        try:
            for event in _not_run(unfinished, reply.stop_reason):
                yield event
            yield ContextChanged(conv.tokens, conv.max_tokens, usage=progress.usage)
        except BaseException:  # stopped before the tools started: their calls still need results
            if calls:
                conv.add_tool_results([_result_block(c["id"], None) for c in calls], note=STOPPED_NOTE)
            raise
        if reply.stop_reason == "pause_turn":
            continue
        if reply.stop_reason != "tool_use" or not calls:
            yield TurnFinished(_STOP_REASONS.get(reply.stop_reason, "end_turn"), progress.usage, progress.detail)
            return
        async with aclosing(_run_tools(agent, conv, turn, calls, reply.invalid_calls)) as tool_events:
            async for event in tool_events:
                yield event
    yield TurnFinished("max_steps", progress.usage, progress.detail)


async def _summarize(agent: Agent, conv: ConversationManager) -> bool:
    try:
        return await conv.summarize(agent.summarize)
    except LLMError as exc:  # an oversized history is still worth a try; a failed summary is not fatal
        log.warning("summary failed, going on with the full history: %s", exc.message)
        return False


def _messages(conv: ConversationManager, turn: Turn, start: int) -> list[dict[str, Any]]:
    if turn.window is None:
        return conv.messages
    return window(conv.messages[:start], turn.window) + conv.messages[start:]


def _request(agent: Agent, conv: ConversationManager, turn: Turn, progress: _Progress) -> ModelRequest:
    settings = agent.settings
    budget = settings.thinking_budget if turn.thinking else None
    max_tokens = settings.max_output_tokens + (budget or 0)
    choice, progress.forced = progress.forced, None
    encoded = None
    if choice is not None and turn.focus is not None:
        messages = [{"role": "user", "content": turn.focus}]  # no breakpoint: nothing would read it again
    else:
        history = _messages(conv, turn, progress.start)
        messages = with_breakpoint(history)  # the last message is another: the ones before it are the history's
        if history is conv.messages and len(history) > 1:
            encoded = conv.encoded(len(history) - 1)
    return ModelRequest(model=turn.model, system=turn.system, messages=messages,
                        tools=cached_tools(turn.tools), max_tokens=max_tokens, thinking_budget=budget,
                        tool_choice=choice, encoded=encoded)


async def _model_call(agent: Agent, conv: ConversationManager, turn: Turn, progress: _Progress) -> AsyncIterator[Any]:
    """One streamed call, watched (`waiting`): events say so while the model is silent or
    the call is tried again. On error or abort, the text streamed so far is kept, marked."""
    streamed: list[str] = []
    fields: dict[str, FieldStream | None] = {}  # per tool_use id: the input field shown as it is written
    settings = agent.settings
    call = watched(agent.model.stream(_request(agent, conv, turn, progress)), every=settings.status_interval,
                   idle=settings.model_idle_timeout, urgency=agent.urgency)
    try:
        async with aclosing(call) as items:
            async for item in items:
                if isinstance(item, ToolInputDelta):
                    if item.tool_id not in fields:
                        field_name = agent.registry.streamed_field(item.name)
                        fields[item.tool_id] = FieldStream(field_name) if field_name else None
                    stream = fields[item.tool_id]
                    text = stream.feed(item.piece) if stream is not None else ""
                    if text:
                        yield ArtifactDelta(item.tool_id, text)
                    continue
                if isinstance(item, CitationDelta):
                    # Only what resolves to a chunk of the user's own knowledge is told.
                    knowledge = turn.services.knowledge
                    citation = await knowledge.cite(item.index, item.source, item.cited_text) if knowledge else None
                    if citation is not None:
                        yield Cited(citation)
                    continue
                if isinstance(item, TextDelta):
                    streamed.append(item.text)
                yield item
    except LLMError as exc:
        conv.add_cut_reply("".join(streamed), FAILED_NOTE)
        yield TurnFailed(exc.code, exc.message)
    except BaseException:  # cancellation (abort) or the generator being closed
        conv.add_cut_reply("".join(streamed), STOPPED_NOTE)
        raise


def _keep_reply(conv: ConversationManager, reply: ModelReply) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Adds the reply to the history; returns the tool calls to run and those that cannot.
    Only a reply that stopped for tool use has finished calls: in any other (one cut by
    max_tokens) a call was not finished, so it leaves the history for a note saying so."""
    content, unfinished = reply.content, []
    if reply.stop_reason != "tool_use":
        unfinished = [b for b in content if b["type"] == "tool_use"]
        content = [b for b in content if b["type"] != "tool_use"]
        content += [{"type": "text", "text": f"[The call to {c['name']} was not run: "
                                             f"{_why_not_run(reply.stop_reason)}.]"} for c in unfinished]
    if not any(b["type"] in ("text", "tool_use") for b in content):
        content = [*content, {"type": "text", "text": "[No reply.]"}]
    conv.add_assistant(content, reply.usage)
    return [b for b in content if b["type"] == "tool_use"], unfinished


def _why_not_run(stop_reason: str) -> str:
    return _NOT_RUN.get(stop_reason, f"the model stopped ({stop_reason}) before it finished writing this call")


def _not_run(calls: list[dict[str, Any]], stop_reason: str) -> list[Event]:
    """Cards for calls that were streamed (maybe as artifact text) but never finished: the
    client learns that nothing of them was applied."""
    output = f"Not run: {_why_not_run(stop_reason)}; what was streamed for it was discarded."
    events: list[Event] = []
    for call in calls:
        events += [ToolStarted(call["id"], call["name"], {}), ToolEnded(call["id"], call["name"], output, 0.0, True)]
    return events


def _invalid_result(raw: str) -> ToolResult:
    message = INVALID_JSON_RESULT.format(raw=shorten(raw, INVALID_JSON_SHOWN))
    return ToolResult(content=message, output=message, is_error=True)


async def _run_tools(agent: Agent, conv: ConversationManager, turn: Turn, calls: list[dict[str, Any]],
                     invalid: dict[str, str], *, announce: bool = True) -> AsyncIterator[Event]:
    """Runs all calls of one reply concurrently, streaming their progress as it comes; a call
    whose input was not valid JSON does not run, its result tells the model so."""
    events: asyncio.Queue[Event] = asyncio.Queue()
    results: dict[str, ToolResult] = {}
    canvas = turn.services.canvas  # what a call changed of it is told before the call's end

    def on_progress(tool_id: str, elapsed: float, status: str) -> None:
        events.put_nowait(ToolProgressed(tool_id, elapsed, status))

    async def run(call: dict[str, Any]) -> None:
        started = asyncio.get_running_loop().time()
        try:
            if call["id"] in invalid:
                result = _invalid_result(invalid[call["id"]])
            else:
                result = await _consent(turn, call, events.put_nowait, started)
                if result is None and turn.client_calls.runs(call["name"]):
                    on_progress(call["id"], asyncio.get_running_loop().time() - started, CLIENT_WAITING)
                    result = await turn.client_calls.wait(call["id"])
                elif result is None:
                    result = await agent.registry.run(
                        call["id"], call["name"], call["input"], owner=turn.owner,
                        conversation_id=turn.conversation_id, on_progress=on_progress, services=turn.services)
        except Exception:  # the registry reports tool failures itself; this is a bug in it
            log.exception("tool registry failed on %s", call["name"])
            result = ToolResult(content="Internal error while running this tool.", output=None, is_error=True)
        results[call["id"]] = result
        for frame in canvas.announcements() if canvas is not None else ():
            events.put_nowait(ArtifactChanged(frame))
        events.put_nowait(ToolEnded(call["id"], call["name"], result.output,
                                    asyncio.get_running_loop().time() - started, result.is_error))

    tasks: list[asyncio.Task[None]] = []
    finished = False
    try:
        for call in calls if announce else ():
            yield ToolStarted(call["id"], call["name"], call["input"])
        tasks = [turn.tool_tasks.start(run(call), f"tool:{call['name']}") for call in calls]
        remaining = len(calls)
        while remaining:
            event = await events.get()
            remaining -= isinstance(event, ToolEnded)
            yield event
        finished = True
    finally:
        if not finished and tasks:
            await _cancel(tasks)
        conv.add_tool_results([_result_block(call["id"], results.get(call["id"])) for call in calls],
                              note=None if finished else STOPPED_NOTE)


async def _consent(turn: Turn, call: dict[str, Any], emit: Callable[[Event], None],
                   started: float) -> ToolResult | None:
    """Asks the user about a call that needs approval: None once it may run, else the
    result of the call that did not (declined, with the user's reason, or timed out)."""
    gate = turn.approvals
    if not gate.needs(call["name"]):
        return None
    emit(ApprovalRequested(call["id"], call["name"], call["input"]))
    decision = await gate.wait(call["id"])
    if decision.approved:
        # Tells every client the request is answered (the card stops asking) before the tool runs.
        emit(ToolProgressed(call["id"], asyncio.get_running_loop().time() - started, "Approved; running"))
        return None
    text = decision.refusal(gate.timeout)
    return ToolResult(content=text, output=text, is_error=True)


async def _cancel(tasks: list[asyncio.Task[None]]) -> None:
    for task in tasks:
        task.cancel()
    if all(task.done() for task in tasks):
        return  # an abort cancelled them first (`ToolTasks`): they ended ahead of this step
    # Tools get a moment to kill what they started; abort must still end within a second.
    await asyncio.wait(tasks, timeout=0.5)


def _result_block(tool_id: str, result: ToolResult | None) -> dict[str, Any]:
    if result is None:
        return {"type": "tool_result", "tool_use_id": tool_id, "content": CANCELLED_RESULT, "is_error": True}
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": tool_id, "content": result.content or "(no output)"}
    if result.is_error:
        block["is_error"] = True
    return block

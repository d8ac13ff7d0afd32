"""The ReAct loop driven in-process by a scripted model, with real tools, a real registry
and a real ConversationManager on SQLite. Asserts on what the loop yields and on the
history the model would be sent next, never on the loop's internals."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
from contextlib import aclosing
from typing import Any, Callable

import pytest
from langchain_core.tools import tool

from chat_agent.agent.client_calls import WAITING as CLIENT_WAITING
from chat_agent.agent.client_calls import ClientCalls
from chat_agent.agent.events import (ContextChanged, Event, ToolEnded, ToolProgressed, ToolStarted, TurnFailed,
                                     TurnFinished)
from chat_agent.agent.loop import CANCELLED_RESULT, FAILED_NOTE, STOPPED_NOTE, Agent, Turn, run_turn
from chat_agent.config import Settings
from chat_agent.context.conversation import ConversationManager
from chat_agent.context.tokens import TokenCounter
from chat_agent.model import LLMError, ModelReply, TextDelta, ToolInputDelta
from chat_agent.protocol import Usage
from chat_agent.store import CreateConversation
from chat_agent.tooling import ToolRegistry
from tests.cancelling import cancel_within
from tests.scripted_model import (HANG, ScriptedModel, assert_requests_valid, assert_valid, block_types, call,
                                  text_reply, tool_reply, usage, without_cache_marks)

OWNER, CONV = "alice", "c1"


@pytest.fixture(scope="module")
def counter() -> TokenCounter:
    return TokenCounter()


@pytest.fixture
async def conv(db, counter) -> ConversationManager:
    """On the conftest's real SQLite store and writer, which it closes after the test."""
    db[1].submit([CreateConversation(OWNER, CONV, 1.0)])
    return ConversationManager(OWNER, CONV, model=(), counter=counter, writer=db[1],
                               summary_chars=300_000, max_tokens=200_000)


def make_agent(script, *tools, max_steps: int = 12) -> Agent:
    registry = ToolRegistry()
    for each in tools:
        registry.add(each)
    return Agent(ScriptedModel(script), registry, Settings(max_steps=max_steps))


def ask(agent: Agent, conv: ConversationManager, text: str, **options: Any) -> Turn:
    """Adds the user message as the sessions do, and the turn that answers it."""
    conv.add_user([{"type": "text", "text": text}])
    return Turn(owner=OWNER, conversation_id=CONV, model="claude-test", system="You are being tested.",
                tools=agent.registry.schemas(), **options)


async def drive(agent: Agent, conv: ConversationManager, turn: Turn) -> list[Event]:
    async with aclosing(run_turn(agent, conv, turn)) as events:
        return [event async for event in events]


async def interrupt(agent: Agent, conv: ConversationManager, turn: Turn,
                    when: Callable[[Event], bool], how: str) -> list[Event]:
    """Stops the turn at the first event matching `when`: "aclose" closes the generator at
    that yield (a consumer that stops iterating); "cancel" cancels the iterating task
    while the loop is awaiting whatever comes after it (the stop button)."""
    seen: list[Event] = []
    reached = asyncio.Event()

    async def consume() -> None:
        async with aclosing(run_turn(agent, conv, turn)) as events:
            async for event in events:
                seen.append(event)
                if when(event):
                    if how == "aclose":
                        return
                    reached.set()

    task = asyncio.create_task(consume())
    if how == "aclose":
        await asyncio.wait_for(task, 2)
    else:
        await asyncio.wait_for(reached.wait(), 2)
        await cancel_within(task, 1.0)
    return seen


def of(kind: type, events: list[Event]) -> list[Any]:
    return [e for e in events if isinstance(e, kind)]


@tool
async def echo(text: str) -> str:
    """Repeats the text."""
    return f"echo:{text}"


@tool
async def broken(path: str) -> str:
    """Writes to a full disk."""
    raise ValueError(f"the disk is full at {path}")


def meeting_tools():
    """Two tools that each wait for the other to have started: run one after the other,
    the first times out, so both succeeding proves they ran at the same time."""
    arrived = {"ping": asyncio.Event(), "pong": asyncio.Event()}

    async def meet(me: str, other: str, note: str) -> str:
        arrived[me].set()
        await asyncio.wait_for(arrived[other].wait(), 2)
        return f"{me}:{note}"

    @tool
    async def ping(note: str) -> str:
        """Meets pong."""
        return await meet("ping", "pong", note)

    @tool
    async def pong(note: str) -> str:
        """Meets ping."""
        return await meet("pong", "ping", note)

    return ping, pong


def stalling_tool(log: list[str]):
    @tool
    async def stall(seconds: float) -> str:
        """Never finishes in time."""
        try:
            await asyncio.sleep(seconds)
        except asyncio.CancelledError:
            log.append("cancelled")
            raise
        return "finished"

    return stall


async def test_a_text_reply_ends_the_turn(conv):
    agent = make_agent([text_reply("Hello there.", tokens=usage(12, 3))])
    events = await drive(agent, conv, ask(agent, conv, "Hi"))
    assert "".join(e.text for e in of(TextDelta, events)) == "Hello there."
    assert events[-1] == TurnFinished("end_turn", Usage(input_tokens=12, output_tokens=3))
    assert conv.messages[-1] == {"role": "assistant", "content": [{"type": "text", "text": "Hello there."}]}
    assert without_cache_marks(agent.model.requests[0].messages) == conv.messages[:1]
    assert_valid(conv.messages)


async def test_parallel_tools_run_together_and_answer_in_one_message(conv):
    script = [tool_reply(call("t1", "ping", note="a"), call("t2", "pong", note="b"), text="Both at once.",
                         tokens=usage(100, 20)),
              text_reply("Done.", tokens=usage(150, 7))]
    agent = make_agent(script, *meeting_tools())
    events = await drive(agent, conv, ask(agent, conv, "Ping and pong"))
    kinds = [type(e) for e in events if isinstance(e, (ToolStarted, ToolEnded))]
    assert kinds == [ToolStarted, ToolStarted, ToolEnded, ToolEnded]
    assert [e.tool_id for e in of(ToolStarted, events)] == ["t1", "t2"]
    assert sorted((e.tool_id, e.output, e.is_error) for e in of(ToolEnded, events)) == [
        ("t1", "ping:a", False), ("t2", "pong:b", False)]
    results = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ping:a"},
                                           {"type": "tool_result", "tool_use_id": "t2", "content": "pong:b"}]}
    assert conv.messages[2] == results
    assert without_cache_marks(agent.model.requests[1].messages) == conv.messages[:3]
    assert events[-1] == TurnFinished("end_turn", Usage(input_tokens=250, output_tokens=27))
    assert_valid(conv.messages)


async def test_a_failing_tool_gives_an_error_result_and_the_loop_goes_on(conv):
    agent = make_agent([tool_reply(call("t1", "broken", path="/tmp/x")), text_reply("The disk is full.")], broken)
    events = await drive(agent, conv, ask(agent, conv, "Save it"))
    [ended] = of(ToolEnded, events)
    assert ended.is_error and "the disk is full" in ended.output
    assert conv.messages[2]["content"] == [{"type": "tool_result", "tool_use_id": "t1", "is_error": True,
                                            "content": "ValueError: the disk is full at /tmp/x"}]
    assert len(agent.model.requests) == 2 and events[-1].stop_reason == "end_turn"
    assert_valid(conv.messages)


@pytest.mark.parametrize("how", ["cancel", "aclose"])
async def test_stopping_while_a_tool_runs_answers_every_call(db, conv, how):
    tool_log: list[str] = []
    script = [tool_reply(call("t1", "echo", text="fast"), call("t2", "stall", seconds=60)), text_reply("Stopped.")]
    agent = make_agent(script, echo, stalling_tool(tool_log))
    events = await interrupt(agent, conv, ask(agent, conv, "Go"),
                             lambda e: isinstance(e, ToolEnded) and e.tool_id == "t1", how)
    assert not of(TurnFinished, events) and tool_log == ["cancelled"]
    assert conv.messages[-1]["content"] == [
        {"type": "tool_result", "tool_use_id": "t1", "content": "echo:fast"},
        {"type": "tool_result", "tool_use_id": "t2", "content": CANCELLED_RESULT, "is_error": True},
        {"type": "text", "text": STOPPED_NOTE}]
    assert_valid(conv.messages)
    await db[1].flush()  # the repaired history is also what a restart would load
    assert [item.data for item in await db[0].load_history(OWNER, CONV, "model")] == conv.messages
    await drive(agent, conv, ask(agent, conv, "Never mind"))
    assert block_types(agent.model.requests[1].messages[-1]) == ["tool_result", "tool_result", "text", "text"]
    assert_requests_valid(agent.model)
    assert_valid(conv.messages)


def sleeping_tool(running: dict[str, asyncio.Event]):
    @tool
    async def sleep_on(label: str) -> str:
        """Sleeps until cancelled."""
        running.setdefault(label, asyncio.Event()).set()
        await asyncio.sleep(60)
        return "woke"

    return sleep_on


@pytest.mark.parametrize("tools_first", [False, True])
async def test_an_abort_that_cancels_the_tools_first_ends_the_turn_sooner(conv, tools_first):
    """`Turn.tool_tasks.cancel()` before the turn's own task (what `RunningTurn.abort` does):
    the tools unwind in the same turn of the event loop as the turn, ahead of it, instead of
    one turn after it saw its cancellation, and the turn does not wait another turn for them.
    Under load each turn of the loop is tens of ms of a tool's abort."""
    running: dict[str, asyncio.Event] = {}
    agent = make_agent([tool_reply(call("t1", "sleep_on", label="a"), call("t2", "sleep_on", label="b"))],
                       sleeping_tool(running))
    turn = ask(agent, conv, "Sleep twice")

    async def consume() -> None:
        async with aclosing(run_turn(agent, conv, turn)) as events:
            async for _ in events:
                pass

    task = asyncio.create_task(consume())
    for name in ("a", "b"):
        await asyncio.wait_for(running.setdefault(name, asyncio.Event()).wait(), 2)
    loop, passes, ended = asyncio.get_running_loop(), [0], []

    def tick() -> None:  # one call per turn of the loop, until the turn's task has ended
        passes[0] += 1
        if not task.done():
            loop.call_soon(tick)
        elif not ended:
            ended.append(passes[0])

    if tools_first:
        turn.tool_tasks.cancel()
    loop.call_soon(tick)
    await cancel_within(task, 1.0)  # cancels the turn's task now
    while not ended:
        await asyncio.sleep(0)
    # Cancelled first, the tools end in the turn of the loop after the abort's, and the turn
    # right behind them; through the turn alone they unwind a turn later, and the turn waits
    # two more to see them end (`tick` sees the task ended one turn after it did).
    assert ended == ([2] if tools_first else [5])
    assert conv.messages[-1]["content"][:2] == [
        {"type": "tool_result", "tool_use_id": "t1", "content": CANCELLED_RESULT, "is_error": True},
        {"type": "tool_result", "tool_use_id": "t2", "content": CANCELLED_RESULT, "is_error": True}]
    assert_valid(conv.messages)


@pytest.mark.parametrize("how", ["cancel", "aclose"])
async def test_stopping_while_text_streams_keeps_it_marked(conv, how):
    agent = make_agent([[TextDelta("Let me think about "), HANG], text_reply("Fine.")])
    events = await interrupt(agent, conv, ask(agent, conv, "Think"), lambda e: isinstance(e, TextDelta), how)
    assert [e.text for e in of(TextDelta, events)] == ["Let me think about "]
    assert conv.messages[-1] == {"role": "assistant",
                                 "content": [{"type": "text", "text": f"Let me think about\n\n{STOPPED_NOTE}"}]}
    assert_valid(conv.messages)
    await drive(agent, conv, ask(agent, conv, "Go on"))
    assert [m["role"] for m in agent.model.requests[1].messages] == ["user", "assistant", "user"]
    assert_requests_valid(agent.model)
    assert_valid(conv.messages)


@pytest.mark.parametrize("stop_at", [ContextChanged, ToolStarted])
async def test_stopping_between_reply_and_tools_still_answers_the_call(conv, stop_at):
    agent = make_agent([tool_reply(call("t1", "echo", text="x"))], echo)
    await interrupt(agent, conv, ask(agent, conv, "Go"), lambda e: isinstance(e, stop_at), "aclose")
    assert_valid(conv.messages)


async def test_max_steps_stops_a_model_that_never_stops(conv):
    script = (tool_reply(call(f"t{i}", "echo", text=str(i))) for i in itertools.count())
    agent = make_agent(script, echo, max_steps=3)
    events = await drive(agent, conv, ask(agent, conv, "Loop forever"))
    assert len(agent.model.requests) == 3 and len(of(ToolEnded, events)) == 3
    assert events[-1] == TurnFinished("max_steps", Usage(input_tokens=30, output_tokens=15))
    assert conv.messages[-1]["content"] == [{"type": "tool_result", "tool_use_id": "t2", "content": "echo:2"}]
    assert_requests_valid(agent.model)
    assert_valid(conv.messages)


async def test_a_model_error_fails_the_turn_and_keeps_the_text_marked(conv):
    script = [tool_reply(call("t1", "echo", text="x"), tokens=usage(40, 4)),
              [TextDelta("Half an ans"), LLMError("llm_error", "Overloaded")]]
    agent = make_agent(script, echo)
    events = await drive(agent, conv, ask(agent, conv, "Answer"))
    assert events[-2:] == [TurnFailed("llm_error", "Overloaded"),
                           TurnFinished("error", Usage(input_tokens=40, output_tokens=4))]
    assert conv.messages[-1] == {"role": "assistant",
                                 "content": [{"type": "text", "text": f"Half an ans\n\n{FAILED_NOTE}"}]}
    assert_valid(conv.messages)


async def test_a_forced_tool_choice_goes_with_the_first_call_only(conv):
    agent = make_agent([tool_reply(call("t1", "echo", text="x")), text_reply("Edited.")], echo)
    choice = {"type": "tool", "name": "echo"}
    await drive(agent, conv, ask(agent, conv, "Edit the highlight", tool_choice=choice))
    assert [r.tool_choice for r in agent.model.requests] == [choice, None]
    assert_valid(conv.messages)


PAUSED = [{"type": "text", "text": "Searching."},
          {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "x"}}]


def paused_script() -> list:
    return [[TextDelta("Searching."), ModelReply(PAUSED, "pause_turn", usage(30, 3))],
            text_reply("Found it.", tokens=usage(50, 4))]


async def test_pause_turn_continues_without_running_tools(conv):
    agent = make_agent(paused_script(), echo)
    events = await drive(agent, conv, ask(agent, conv, "Search"))
    assert not of(ToolStarted, events)
    second = without_cache_marks(agent.model.requests[1].messages)
    assert second[-1] == {"role": "assistant", "content": PAUSED}
    assert events[-1] == TurnFinished("end_turn", Usage(input_tokens=80, output_tokens=7))
    assert_requests_valid(agent.model)


async def test_pause_turn_history_alternates(conv):
    agent = make_agent(paused_script(), echo)
    await drive(agent, conv, ask(agent, conv, "Search"))
    assert_valid(conv.messages)


# ---- replies the real API sends that must not break the next call --------------------------------


def recording_tool(calls: list[dict]):
    @tool
    async def write(content: str) -> str:
        """Writes the content."""
        calls.append({"content": content})
        return "written"

    return write


async def test_a_call_cut_by_max_tokens_is_closed_and_left_out_of_the_history(conv):
    ran: list[dict] = []
    cut = [TextDelta("Writing it."), ToolInputDelta("t1", "write", '{"content": "half a po'),
           ModelReply([{"type": "text", "text": "Writing it."}, call("t1", "write")], "max_tokens", usage())]
    agent = make_agent([cut, text_reply("Shorter then.")], recording_tool(ran))
    events = await drive(agent, conv, ask(agent, conv, "Write a long poem"))
    started, ended = of(ToolStarted, events), of(ToolEnded, events)
    assert [(s.tool_id, s.name, s.input) for s in started] == [("t1", "write", {})]
    assert [(e.tool_id, e.is_error) for e in ended] == [("t1", True)]
    assert "ran out of output tokens" in ended[0].output and not ran
    kinds = [type(e) for e in events]
    assert kinds.index(ToolStarted) < kinds.index(ToolEnded) < kinds.index(ContextChanged)
    assert events[-1].stop_reason == "max_tokens"
    assert conv.messages[-1] == {"role": "assistant", "content": [
        {"type": "text", "text": "Writing it."},
        {"type": "text", "text": "[The call to write was not run: the model ran out of output tokens before it "
                                 "finished writing this call.]"}]}
    await drive(agent, conv, ask(agent, conv, "Go on"))
    assert_requests_valid(agent.model)
    assert_valid(conv.messages)


async def test_a_call_with_invalid_json_is_an_error_the_model_sees(conv):
    ran: list[dict] = []
    broken = '{"content": oops}'
    script = [[ToolInputDelta("t1", "write", broken),
               ModelReply([call("t1", "write")], "tool_use", usage(), invalid_calls={"t1": broken})],
              tool_reply(call("t2", "write", content="fixed")),
              text_reply("Written.")]
    agent = make_agent(script, recording_tool(ran))
    events = await drive(agent, conv, ask(agent, conv, "Write"))
    first = next(e for e in of(ToolEnded, events) if e.tool_id == "t1")
    assert first.is_error and "not valid JSON" in first.output and broken in first.output
    assert ran == [{"content": "fixed"}]  # only the retried call ran
    second = without_cache_marks(agent.model.requests[1].messages)
    assert second[-2] == {"role": "assistant", "content": [call("t1", "write")]}
    [result] = second[-1]["content"]
    assert result["tool_use_id"] == "t1" and result["is_error"] and broken in result["content"]
    assert events[-1].stop_reason == "end_turn"
    assert_requests_valid(agent.model)
    assert_valid(conv.messages)


REFUSED = ModelReply([{"type": "text", "text": "I can't"}], "refusal", usage(20, 2), stop_detail="Policy.")


async def test_a_refused_exchange_leaves_the_model_history(conv):
    agent = make_agent([text_reply("Hello."), [TextDelta("I can't"), REFUSED], text_reply("Sure.")])
    await drive(agent, conv, ask(agent, conv, "Hi"))
    kept = [dict(m) for m in conv.messages]
    events = await drive(agent, conv, ask(agent, conv, "Something refused"))
    assert events[-1] == TurnFinished("refusal", Usage(input_tokens=20, output_tokens=2), "Policy.")
    assert conv.messages == kept
    await drive(agent, conv, ask(agent, conv, "Something else"))
    third = without_cache_marks(agent.model.requests[2].messages)
    assert [b["text"] for m in third for b in m["content"]] == ["Hi", "Hello.", "Something else"]
    assert_requests_valid(agent.model)


async def test_a_refusal_after_tools_drops_the_whole_exchange(db, conv):
    agent = make_agent([tool_reply(call("t1", "echo", text="x")), [REFUSED], text_reply("Fine.")], echo)
    await drive(agent, conv, ask(agent, conv, "Use a tool, then get refused"))
    assert conv.messages == []
    await db[1].flush()  # what a restart would load agrees
    assert await db[0].load_history(OWNER, CONV, "model") == []
    await drive(agent, conv, ask(agent, conv, "Next"))
    assert without_cache_marks(agent.model.requests[2].messages) == [
        {"role": "user", "content": [{"type": "text", "text": "Next"}]}]


async def test_a_refusal_keeps_what_its_message_was_merged_into(conv):
    """Tool results an aborted turn left stay: without them the call before has no answer."""
    agent = make_agent([tool_reply(call("t1", "stall", seconds=60)), [REFUSED], text_reply("Ok.")],
                       stalling_tool([]))
    await interrupt(agent, conv, ask(agent, conv, "Stall"), lambda e: isinstance(e, ToolStarted), "cancel")
    left = [dict(m) for m in conv.messages]
    assert left[-1]["role"] == "user"  # the cancelled call's result, waiting for the next message
    await drive(agent, conv, ask(agent, conv, "Refuse me"))
    assert conv.messages == left
    await drive(agent, conv, ask(agent, conv, "Then this"))
    assert_requests_valid(agent.model)
    assert_valid(conv.messages)


CHART = {"name": "show_chart", "description": "Shows a chart in the app.",
         "input_schema": {"type": "object", "properties": {"station": {"type": "string"}}}}


async def test_a_client_tool_waits_for_the_clients_result(conv):
    """A tool the client runs is offered with the server's; its call reports that it waits,
    the server's call in the same reply runs meanwhile, and the client's result is what the
    model reads next."""
    script = [tool_reply(call("t1", "show_chart", station="Brest"), call("t2", "echo", text="hi")),
              text_reply("Shown.")]
    agent = make_agent(script, echo)
    clients = ClientCalls([CHART], timeout=5)
    turn = ask(agent, conv, "Chart please", client_calls=clients)
    turn = dataclasses.replace(turn, tools=[*turn.tools, CHART])
    seen: list[Event] = []

    async def consume() -> None:
        async with aclosing(run_turn(agent, conv, turn)) as events:
            async for event in events:
                seen.append(event)
                if isinstance(event, ToolProgressed) and event.status == CLIENT_WAITING:
                    assert not clients.answer("t9", "nobody asked")
                    assert clients.answer("t1", "Chart shown")

    await asyncio.wait_for(consume(), 5)
    assert [t["name"] for t in agent.model.requests[0].tools] == ["echo", "show_chart"]
    assert sorted((e.tool_id, e.output, e.is_error) for e in of(ToolEnded, seen)) == [
        ("t1", "Chart shown", False), ("t2", "echo:hi", False)]
    assert {b["tool_use_id"]: b["content"] for b in conv.messages[2]["content"]} == {"t1": "Chart shown",
                                                                                      "t2": "echo:hi"}
    assert not clients.answer("t1", "again")  # answered once
    assert seen[-1].stop_reason == "end_turn"
    assert_valid(conv.messages)


async def test_a_client_tool_not_answered_in_time_is_an_error(conv):
    agent = make_agent([tool_reply(call("t1", "show_chart", station="Brest")), text_reply("No chart.")])
    turn = ask(agent, conv, "Chart please", client_calls=ClientCalls([CHART], timeout=0.05))
    events = await asyncio.wait_for(drive(agent, conv, turn), 5)
    [ended] = of(ToolEnded, events)
    assert ended.is_error and "did not send this call's result" in ended.output
    assert conv.messages[2]["content"][0]["is_error"] is True and events[-1].stop_reason == "end_turn"

"""Tracing end to end: the real server, the fake Anthropic and Exa APIs, and a real OTLP/HTTP
receiver on loopback; a real client drives turns over the WebSocket and the test reads the
spans the server exported."""

from __future__ import annotations

import time

import pytest

from tests import pace
from tests.conftest import SMALL_MODEL, server_env
from tests.fakes.anthropic_fake import Fault, Reply, Text, ToolUse
from tests.fakes.otlp_receiver import OtlpReceiver, ReceivedSpan
from tests.support import ServerProcess, connect, recv, send, until

TURN = "invoke_agent chat-agent"
SECRET = "zebra-quartz-7731"  # in what the user and the model say: never in a span


@pytest.fixture(scope="module")
def receiver():
    with OtlpReceiver() as fake:
        yield fake


@pytest.fixture(scope="module")
def traced(tmp_path_factory, fake_anthropic, fake_exa, receiver):
    env = server_env(fake_anthropic, fake_exa, OTEL_EXPORTER_OTLP_ENDPOINT=receiver.base_url,
                     OTEL_BSP_SCHEDULE_DELAY="50", OTEL_EXPORTER_OTLP_HEADERS="authorization=Bearer otlp-test")
    with ServerProcess(tmp_path_factory.mktemp("traced"), env) as server:
        yield server


def turn_of(conversation_id: str):
    """A predicate: the turn span of that conversation has arrived."""
    return lambda spans: any(s.name == TURN and s.attributes["gen_ai.conversation.id"] == conversation_id
                             for s in spans)


def trace_of(spans: list[ReceivedSpan], conversation_id: str) -> tuple[ReceivedSpan, list[ReceivedSpan]]:
    """The conversation's (latest) turn span and every span of its trace but it, by start."""
    turn = [s for s in spans if s.name == TURN and s.attributes["gen_ai.conversation.id"] == conversation_id][-1]
    rest = sorted((s for s in spans if s.trace_id == turn.trace_id and s is not turn), key=lambda s: s.start_ns)
    return turn, rest


def no_content_in(spans: list[ReceivedSpan]) -> None:
    for span in spans:
        assert SECRET not in f"{span.name} {span.attributes} {span.status_message}", span


async def test_a_tool_turn_is_one_trace_with_genai_attributes(traced, receiver, fake_anthropic, exa):
    ws, session = await connect(traced)
    conversation_id = session["conversationId"]
    fake_anthropic.enqueue(
        Reply([Text(f"Searching for {SECRET}."), ToolUse("web_search", {"query": SECRET})],
              usage={"input_tokens": 120, "cache_read_input_tokens": 1000, "cache_creation_input_tokens": 200,
                     "output_tokens": 30}),
        Reply(f"Found {SECRET}.", usage={"input_tokens": 90, "cache_read_input_tokens": 1300,
                                         "cache_creation_input_tokens": 0, "output_tokens": 12}))
    await send(ws, type="message", content=f"Look up {SECRET}")
    frames = await until(ws, "done")
    assert frames[-1]["stopReason"] == "end_turn"
    tool_id = next(f["toolId"] for f in frames if f["type"] == "tool_start")
    calls = fake_anthropic._main()[-2:]  # what the fake answered, response by response

    spans = receiver.wait_for(turn_of(conversation_id))
    turn, children = trace_of(spans, conversation_id)
    assert turn.parent_span_id == "" and turn.kind == "INTERNAL" and turn.status == "UNSET"
    assert turn.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert turn.attributes["gen_ai.agent.name"] == "chat-agent"
    assert turn.attributes["chat_agent.turn.stop_reason"] == "end_turn"
    assert turn.attributes["chat_agent.turn.id"].startswith("turn")
    assert turn.attributes["user.hash"] and "local" not in turn.attributes.values()  # the owner, not named
    assert turn.resource["service.name"] == "chat-agent"

    assert [s.name for s in children] == [f"chat {calls[0].body['model']}", "execute_tool web_search",
                                          f"chat {calls[1].body['model']}"]
    assert all(s.parent_span_id == turn.span_id for s in children)  # one trace, the turn the parent of all
    first, tool, second = children
    for span, call, finish in ((first, calls[0], "tool_use"), (second, calls[1], "end_turn")):
        usage = call.usage
        assert span.kind == "CLIENT" and span.status == "UNSET"
        assert span.attributes["gen_ai.operation.name"] == "chat"
        assert span.attributes["gen_ai.provider.name"] == span.attributes["gen_ai.system"] == "anthropic"
        assert span.attributes["gen_ai.request.model"] == call.body["model"]
        assert span.attributes["gen_ai.request.max_tokens"] == call.body["max_tokens"]
        assert span.attributes["gen_ai.request.stream"] is True
        assert span.attributes["gen_ai.response.model"] == call.response["model"]
        assert span.attributes["gen_ai.response.id"] == call.response["id"]
        assert span.attributes["gen_ai.response.finish_reasons"] == (finish,)
        # the convention counts every input token, cached or not; Anthropic reports them apart
        assert span.attributes["gen_ai.usage.input_tokens"] == (usage["input_tokens"] + usage["cache_read_input_tokens"]
                                                                + usage["cache_creation_input_tokens"])
        assert span.attributes["gen_ai.usage.output_tokens"] == usage["output_tokens"]
        assert span.attributes["gen_ai.usage.cache_read.input_tokens"] == usage["cache_read_input_tokens"]
        assert span.attributes["gen_ai.usage.cache_creation.input_tokens"] == usage["cache_creation_input_tokens"]
        assert 0 <= span.attributes["gen_ai.response.time_to_first_chunk"] < 10
        assert span.attributes["server.address"] == "127.0.0.1"
    assert first.attributes["gen_ai.usage.input_tokens"] == 1320 and second.attributes["gen_ai.usage.output_tokens"] == 12
    assert first.end_ns <= tool.start_ns and tool.end_ns <= second.start_ns
    assert tool.status == "UNSET" and tool.attributes == {
        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "web_search", "gen_ai.tool.call.id": tool_id,
        "gen_ai.tool.type": "function"}
    assert receiver.requests[-1]["authorization"] == "Bearer otlp-test"  # OTEL_EXPORTER_OTLP_HEADERS

    # the title job after the first exchange: its own trace, with its (small) model call inside
    spans = receiver.wait_for(lambda spans: any(s.name == "chat_agent title" for s in spans))
    job = next(s for s in spans if s.name == "chat_agent title")
    assert job.attributes["gen_ai.conversation.id"] == conversation_id
    title_call = next(s for s in spans if s.parent_span_id == job.span_id)
    assert title_call.name == f"chat {SMALL_MODEL}" and "gen_ai.request.stream" not in title_call.attributes
    assert title_call.attributes["gen_ai.usage.output_tokens"] > 0
    no_content_in(receiver.spans())
    # the SDK's own spans of its calls are off: one span per model call, not two
    assert {s.scope for s in receiver.spans()} == {"chat_agent"}
    await ws.close()


async def test_an_aborted_turn_ends_its_spans_at_once_marked_aborted(traced, receiver, fake_anthropic):
    ws, session = await connect(traced)
    fake_anthropic.enqueue(Reply("word " * 400, chunk_size=5, delay=0.02))
    await send(ws, type="message", content="write a lot")
    for _ in range(3):
        assert (await recv(ws))["type"] == "content_chunk"
    started = time.monotonic()
    await send(ws, type="abort")
    frames = await until(ws, "done")
    assert frames[-1]["stopReason"] == "aborted" and time.monotonic() - started < pace.scaled(1.0)

    spans = receiver.wait_for(turn_of(session["conversationId"]))
    turn, children = trace_of(spans, session["conversationId"])
    assert turn.status == "ERROR" and turn.status_message == "aborted"
    assert turn.attributes["chat_agent.turn.stop_reason"] == "aborted" and turn.attributes["error.type"] == "aborted"
    [call] = children
    assert call.parent_span_id == turn.span_id and call.status == "ERROR"
    assert call.attributes["error.type"] == "cancelled" and "gen_ai.response.finish_reasons" not in call.attributes
    await ws.close()


async def test_a_failing_tool_is_a_span_in_error(traced, receiver, fake_anthropic, exa):
    ws, session = await connect(traced)
    exa.fail_next(500, "upstream broke")
    fake_anthropic.enqueue(Reply([ToolUse("web_search", {"query": SECRET})]), Reply("The search failed."))
    await send(ws, type="message", content="search")
    frames = await until(ws, "done")
    assert [f["isError"] for f in frames if f["type"] == "tool_end"] == [True]

    spans = receiver.wait_for(turn_of(session["conversationId"]))
    turn, children = trace_of(spans, session["conversationId"])
    tool = next(s for s in children if s.name == "execute_tool web_search")
    assert tool.status == "ERROR" and tool.attributes["error.type"] not in ("", "tool_error")  # the exception's class
    assert tool.status_message == tool.attributes["error.type"]  # its message could quote the input: not kept
    assert turn.status == "UNSET" and turn.attributes["chat_agent.turn.stop_reason"] == "end_turn"
    no_content_in(spans)
    await ws.close()


async def test_a_failed_model_call_fails_its_span_and_the_turn(traced, receiver, fake_anthropic):
    ws, session = await connect(traced)
    fake_anthropic.enqueue(Fault.status(400, message="messages: bad request"))
    await send(ws, type="message", content="hi")
    frames = await until(ws, "done")
    assert frames[-1]["stopReason"] == "error"

    spans = receiver.wait_for(turn_of(session["conversationId"]))
    turn, [call] = trace_of(spans, session["conversationId"])
    assert call.status == "ERROR" and call.attributes["error.type"] == "invalid_request_error"
    assert "400" in call.status_message  # what the client was told
    assert turn.status == "ERROR" and turn.attributes["error.type"] == "llm_error"
    assert turn.attributes["chat_agent.turn.stop_reason"] == "error"
    await ws.close()


async def test_health_says_whether_spans_are_exported(traced, server):
    assert traced.get("/health")[1]["tracing"] is True
    assert server.get("/health")[1]["tracing"] is False  # no OTEL_EXPORTER_OTLP_ENDPOINT


async def test_shutting_down_exports_what_is_left(make_server, receiver, fake_anthropic):
    """Spans wait for the batch (here: ten minutes); stopping the server sends them, the
    span of the turn that the shutdown aborted among them."""
    server = make_server(OTEL_EXPORTER_OTLP_ENDPOINT=receiver.base_url, OTEL_BSP_SCHEDULE_DELAY="600000")
    ws, session = await connect(server)
    fake_anthropic.enqueue(Reply("Done."))
    await send(ws, type="message", content="hi")
    await until(ws, "done")
    fake_anthropic.enqueue(Reply("word " * 400, chunk_size=5, delay=0.05))
    await send(ws, type="message", content="write a lot")
    assert (await recv(ws))["type"] == "content_chunk"
    assert not [s for s in receiver.spans() if s.attributes.get("gen_ai.conversation.id") == session["conversationId"]]
    started = time.monotonic()
    server.stop()
    assert time.monotonic() - started < pace.scaled(10)
    spans = receiver.wait_for(lambda spans: sum(s.name == TURN and s.attributes["gen_ai.conversation.id"]
                                                == session["conversationId"] for s in spans) == 2, timeout=5)
    stops = [s.attributes["chat_agent.turn.stop_reason"] for s in spans
             if s.name == TURN and s.attributes["gen_ai.conversation.id"] == session["conversationId"]]
    assert stops == ["end_turn", "aborted"]

"""The fake Anthropic server, driven through the official SDK and through raw HTTP."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest

from tests import pace, reaper
from tests.fakes.anthropic_fake import (
    FakeAnthropic,
    Fault,
    RecordedRequest,
    RedactedThinking,
    Reply,
    Text,
    Thinking,
    ToolUse,
)

pytestmark = pytest.mark.asyncio

MODEL = "claude-sonnet-4-6"
HEADERS = {"x-api-key": "test-key", "anthropic-version": "2023-06-01"}
SEARCH = {
    "name": "web_search",
    "description": "Search the web.",
    "input_schema": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
}
THINKING = {"type": "enabled", "budget_tokens": 1024}


@pytest.fixture
def fake() -> Iterator[FakeAnthropic]:
    with FakeAnthropic() as server:
        yield server


def sdk(base_url: str, max_retries: int = 0) -> anthropic.AsyncAnthropic:
    # Plain HTTP: skipping the CA bundle saves ~70 ms per client, which adds up over the suite.
    http = anthropic.DefaultAsyncHttpxClient(verify=False)
    return anthropic.AsyncAnthropic(base_url=base_url, api_key="test-key", max_retries=max_retries, http_client=http)


@pytest.fixture
def client(fake: FakeAnthropic) -> anthropic.AsyncAnthropic:
    return sdk(fake.base_url)


def user(content: Any) -> dict[str, Any]:
    return {"role": "user", "content": content}


def assistant(content: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": content}


def request(*messages: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"model": MODEL, "max_tokens": 2048, "messages": list(messages) or [user("hi")], **extra}


async def post(fake: FakeAnthropic, body: Any, headers: dict[str, str] = HEADERS) -> httpx.Response:
    async with httpx.AsyncClient(base_url=fake.base_url, verify=False) as http:
        return await http.post("/v1/messages", json=body, headers=headers)


async def finished(record: RecordedRequest, timeout: float = 2.0) -> RecordedRequest:
    deadline = time.monotonic() + timeout
    while not record.finished.is_set():
        assert time.monotonic() < deadline, "the fake never finished the response"
        await asyncio.sleep(0.01)
    return record


# -- streaming through the SDK ---------------------------------------------------------------


async def test_sdk_accumulates_thinking_text_and_split_tool_input(fake, client) -> None:
    tool_input = {"query": 'fake "quoted" ünïcode', "limit": 3, "nested": {"a": [1, 2]}}
    fake.enqueue(
        Reply([Thinking("Search first."), Text("Let me look."), ToolUse("web_search", tool_input)], chunk_size=3)
    )
    body = request(user("find it"), tools=[SEARCH], thinking=THINKING)
    async with client.messages.stream(**body) as stream:
        texts = [event.text async for event in stream if event.type == "text"]
        message = await stream.get_final_message()
    thinking, text, tool = message.content
    assert texts == ["Let", " me", " lo", "ok."]
    assert (thinking.thinking, text.text, tool.input) == ("Search first.", "Let me look.", tool_input)
    assert tool.id.startswith("toolu_01") and message.id.startswith("msg_01")
    assert message.stop_reason == "tool_use" and message.usage.output_tokens > 1

    # The signed thinking block goes back verbatim in the tool loop and is accepted.
    result = {"type": "tool_result", "tool_use_id": tool.id, "content": "results"}
    follow = request(
        user("find it"), assistant(message.to_param()["content"]), user([result]), tools=[SEARCH], thinking=THINKING
    )
    reply = await client.messages.create(**follow)
    assert reply.content[-1].text == "Done: results"


async def test_raw_sse_matches_the_real_wire_format(fake) -> None:
    fake.enqueue(Reply([Text("Hi there"), ToolUse("web_search", {"query": "a long query string here"})]))
    response = await post(fake, request(tools=[SEARCH], stream=True))
    assert response.headers["content-type"] == "text/event-stream; charset=utf-8"
    assert response.headers["request-id"].startswith("req_")
    frames = [f for f in response.text.split("\n\n") if f]
    assert frames[0].startswith("event: message_start\ndata: {")
    assert 'event: ping\ndata: {"type": "ping"}' in frames
    events = [json.loads(f.split("data: ", 1)[1]) for f in frames]
    assert [e["type"] for e in events][-2:] == ["message_delta", "message_stop"]
    start = events[0]["message"]
    assert start["content"] == [] and start["stop_reason"] is None
    assert set(start["usage"]) >= {
        "input_tokens",
        "output_tokens",
        "cache_creation_input_tokens",
        "cache_read_input_tokens",
    }
    tool_start = next(e for e in events if e["type"] == "content_block_start" and e["index"] == 1)
    assert tool_start["content_block"]["input"] == {}
    pieces = [e["delta"]["partial_json"] for e in events if e["type"] == "content_block_delta" and e["index"] == 1]
    assert pieces[0] == ""  # as the real API: an empty piece first
    assert json.loads("".join(pieces)) == {"query": "a long query string here"}
    assert any(p.count('"') % 2 for p in pieces), "some piece should end mid-string"
    assert events[-2]["delta"] == {"stop_reason": "tool_use", "stop_sequence": None}


async def test_non_streaming_returns_full_message(fake, client) -> None:
    fake.enqueue(Reply("Plain.", stop_reason="max_tokens", usage={"output_tokens": 7}))
    message = await client.messages.create(**request())
    assert message.content[0].text == "Plain." and message.stop_reason == "max_tokens"
    assert message.usage.output_tokens == 7
    assert fake.requests[0]["messages"] == [user("hi")] and fake.requests[0].status == 200


# -- odd shapes the real API sends ------------------------------------------------------------------


async def sse_events(fake: FakeAnthropic, body: dict[str, Any]) -> list[dict[str, Any]]:
    response = await post(fake, {**body, "stream": True})
    assert response.status_code == 200, response.text
    return [json.loads(f.split("data: ", 1)[1]) for f in response.text.split("\n\n") if f]


def deltas(events: list[dict[str, Any]], index: int) -> list[dict[str, Any]]:
    return [e["delta"] for e in events if e["type"] == "content_block_delta" and e["index"] == index]


def stops(events: list[dict[str, Any]]) -> list[int]:
    return [e["index"] for e in events if e["type"] == "content_block_stop"]


async def test_thinking_cut_by_max_tokens_has_no_signature(fake, client) -> None:
    fake.enqueue(Reply([Thinking("A long thought that never")], cut=True))
    events = await sse_events(fake, request(thinking=THINKING))
    assert [d["type"] for d in deltas(events, 0)] == ["thinking_delta"] * 5  # no signature_delta
    assert events[-2]["delta"]["stop_reason"] == "max_tokens"
    # Through the SDK the block keeps the empty signature it opened with: the real API refuses it back.
    fake.enqueue(Reply([Thinking("Cut again")], cut=True))
    async with client.messages.stream(**request(thinking=THINKING)) as stream:
        message = await stream.get_final_message()
    assert (message.content[0].thinking, message.content[0].signature) == ("Cut again", "")
    with pytest.raises(anthropic.BadRequestError, match="Invalid signature in thinking block"):
        await client.messages.create(
            **request(user("q"), assistant(message.to_param()["content"]), user("go on"), thinking=THINKING)
        )


async def test_tool_use_cut_by_max_tokens_never_closes(fake, client) -> None:
    cut = '{"query": "the start of a long qu'
    fake.enqueue(Reply([Text("Searching."), ToolUse("web_search", raw_json=cut)], cut=True, chunk_size=7))
    events = await sse_events(fake, request(tools=[SEARCH]))
    assert "".join(d["partial_json"] for d in deltas(events, 1)) == cut
    assert stops(events) == [0]  # as in the SDK's recorded stream: no content_block_stop for the call
    assert events[-2]["delta"]["stop_reason"] == "max_tokens"
    fake.enqueue(Reply([ToolUse("web_search", raw_json=cut)], cut=True))
    async with client.messages.stream(**request(tools=[SEARCH])) as stream:
        message = await stream.get_final_message()
    assert message.stop_reason == "max_tokens" and message.content[0].input == {}  # the cut string is left out


async def test_invalid_tool_json_breaks_the_sdk_accumulator(fake, client) -> None:
    broken = '{"query": "paris", "unit": celsius}'
    fake.enqueue(Reply([ToolUse("web_search", raw_json=broken)], chunk_size=9))
    events = await sse_events(fake, request(tools=[SEARCH]))
    assert "".join(d["partial_json"] for d in deltas(events, 0)) == broken
    assert stops(events) == [0] and events[-2]["delta"]["stop_reason"] == "tool_use"
    fake.enqueue(Reply([ToolUse("web_search", raw_json=broken)]))
    with pytest.raises(ValueError, match="Unable to parse tool parameter JSON from model"):
        async with client.messages.stream(**request(tools=[SEARCH])) as stream:
            await stream.get_final_message()


REFUSAL = {"type": "refusal", "category": "cyber", "explanation": "This request was refused due to policy."}


async def test_refusal_explains_itself_in_stop_details(fake, client) -> None:
    fake.enqueue(Reply([Text("")], stop_reason="refusal", stop_details=REFUSAL))
    events = await sse_events(fake, request())
    assert "stop_details" not in events[0]["message"]
    assert events[-2]["delta"] == {"stop_reason": "refusal", "stop_sequence": None, "stop_details": REFUSAL}
    fake.enqueue(Reply("No.", stop_reason="refusal", stop_details=REFUSAL))
    async with client.messages.stream(**request()) as stream:
        streamed = await stream.get_final_message()
    fake.enqueue(Reply("No.", stop_reason="refusal", stop_details=REFUSAL))
    plain = await client.messages.create(**request())
    for message in (streamed, plain):
        assert message.stop_reason == "refusal" and message.stop_details.explanation == REFUSAL["explanation"]
        assert message.stop_details.category == "cyber"


async def test_context_window_exceeded_stop_reason(fake, client) -> None:
    fake.enqueue(Reply("Out of room", stop_reason="model_context_window_exceeded"))
    async with client.messages.stream(**request()) as stream:
        message = await stream.get_final_message()
    assert message.stop_reason == "model_context_window_exceeded" and message.content[0].text == "Out of room"


# -- validation ------------------------------------------------------------------------------------

TOOL_USE = {"type": "tool_use", "id": "toolu_01abc", "name": "web_search", "input": {"query": "x"}}
RESULT = {"type": "tool_result", "tool_use_id": "toolu_01abc", "content": "ok"}
TEXT = {"type": "text", "text": "note"}


def cached(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text, "cache_control": {"type": "ephemeral"}}


VALIDATION_CASES = [  # (body, expected error message; None: accepted)
    ({"max_tokens": 10, "messages": [user("x")]}, "model: Field required"),
    ({"model": MODEL, "messages": [user("x")]}, "max_tokens: Field required"),
    ({"model": MODEL, "max_tokens": "10", "messages": [user("x")]}, "max_tokens: Input should be a valid integer"),
    ({"model": MODEL, "max_tokens": 10}, "messages: Field required"),
    (request(), None),  # sanity: the base request is valid
    ({**request(), "messages": []}, "at least one message"),
    ({**request(), "parameters": {}}, "parameters: Extra inputs are not permitted"),
    (request(assistant("hi")), 'first message must use the "user" role'),
    (request(user("a"), {"role": "system", "content": "b"}), "messages.1.role: Input should be 'user' or 'assistant'"),
    (request(user([{"type": "text", "text": ""}])), "messages: text content blocks must be non-empty"),
    (request(user("")), "messages.0: all messages must have non-empty content"),
    (request(user("q"), assistant("The answer is ")), "final assistant content cannot end with trailing whitespace"),
    (
        request(user("q"), assistant([TOOL_USE]), user("next")),
        "messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: toolu_01abc",
    ),
    (request(user("q"), assistant([TOOL_USE])), "`tool_use` ids were found without `tool_result`"),
    (
        request(user("q"), assistant("a"), user([RESULT])),
        "messages.2.content.0: unexpected `tool_use_id` found in `tool_result` blocks: toolu_01abc",
    ),
    (request(user("q"), assistant([TOOL_USE]), user([TEXT, RESULT])), "`tool_result` blocks must come first"),
    (
        request(tools=[{**SEARCH, "name": "web search"}]),
        "tools.0.custom.name: String should match pattern '^[a-zA-Z0-9_-]{1,128}$'",
    ),
    (request(tools=[SEARCH, SEARCH]), "Tool names must be unique"),
    (
        request(tools=[{**SEARCH, "input_schema": {"type": "array"}}]),
        "tools.0.custom.input_schema.type: Input should be 'object'",
    ),
    (
        request(tools=[{**SEARCH, "input_schema": {"type": "object", "properties": {"q": {"type": "strng"}}}}]),
        "JSON schema is invalid",
    ),
    (request(tools=[{**SEARCH, "parameters": {}}]), "tools.0.custom.parameters: Extra inputs are not permitted"),
    (request(tools=[SEARCH], tool_choice={"type": "tool", "name": "nope"}), "Tool 'nope' not found"),
    (
        request(tools=[SEARCH], tool_choice={"type": "any"}, thinking=THINKING),
        "Thinking may not be enabled when tool_choice forces tool use",
    ),
    (
        request(thinking={"type": "enabled", "budget_tokens": 1000}),
        "budget_tokens: Input should be greater than or equal to 1024",
    ),
    ({**request(thinking=THINKING), "max_tokens": 1024}, "`max_tokens` must be greater than `thinking.budget_tokens`"),
    (
        request(user("q"), assistant([TOOL_USE]), user([RESULT]), tools=[SEARCH], thinking=THINKING),
        "Expected `thinking` or `redacted_thinking`, but found `tool_use`",
    ),
    (
        request(
            user("q"),
            assistant([{"type": "thinking", "thinking": "x", "signature": "Zm9v"}, TOOL_USE]),
            user([RESULT]),
            tools=[SEARCH],
            thinking=THINKING,
        ),
        "messages.1.content.0: Invalid signature in thinking block",
    ),
    (
        request(system=[cached("a"), cached("b"), cached("c")], messages=[user([cached("d"), cached("e")])]),
        "A maximum of 4 blocks with cache_control may be provided. Found 5.",
    ),
    (request(user("a"), user("b"), assistant("c"), assistant("d"), user("e")), None),  # same-role runs are merged
    (request(user("q"), assistant([TOOL_USE]), user([RESULT]), user([TEXT]), tools=[SEARCH]), None),
]


@pytest.mark.parametrize(("body", "expected"), VALIDATION_CASES)
async def test_validation_like_the_real_api(fake, body, expected) -> None:
    fake.enqueue(Reply("scripted"))
    response = await post(fake, body)
    if expected is None:
        assert response.status_code == 200, response.text
        assert fake.pending == 0
        return
    assert response.status_code == 400
    error = response.json()
    assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error"
    assert expected in error["error"]["message"]
    assert error["request_id"] == response.headers["request-id"]
    assert fake.requests[-1].error == error["error"]["message"]
    assert fake.pending == 1  # a rejected request never reaches the script, as it never reaches the model


async def test_headers_are_required(fake) -> None:
    no_key = await post(fake, request(), headers={"anthropic-version": "2023-06-01"})
    assert no_key.status_code == 401 and no_key.json()["error"]["type"] == "authentication_error"
    no_version = await post(fake, request(), headers={"x-api-key": "k"})
    assert no_version.status_code == 400 and "anthropic-version" in no_version.json()["error"]["message"]


async def test_bad_request_surfaces_in_the_sdk(fake, client) -> None:
    with pytest.raises(anthropic.BadRequestError) as caught:
        await client.messages.create(model=MODEL, max_tokens=10, messages=[user("q"), assistant("trailing ")])
    assert caught.value.status_code == 400 and caught.value.type == "invalid_request_error"
    assert "trailing whitespace" in caught.value.api_message


async def test_edited_thinking_fails_its_signature(fake, client) -> None:
    fake.enqueue(Reply([Thinking("Plan A."), ToolUse("web_search", {"query": "q"})]))
    first = await client.messages.create(**request(user("q"), tools=[SEARCH], thinking=THINKING))
    content = first.to_param()["content"]
    content[0] = {**content[0].model_dump(), "thinking": "Plan B."}
    result = {"type": "tool_result", "tool_use_id": first.content[1].id, "content": "r"}
    with pytest.raises(anthropic.BadRequestError, match="Invalid signature in thinking block"):
        await client.messages.create(
            **request(user("q"), assistant(content), user([result]), tools=[SEARCH], thinking=THINKING)
        )


async def test_redacted_thinking_goes_back_only_as_issued(fake, client) -> None:
    fake.enqueue(Reply([RedactedThinking(), ToolUse("web_search", {"query": "q"})]))
    first = await client.messages.create(**request(user("q"), tools=[SEARCH], thinking=THINKING))
    content = [block.model_dump(exclude_none=True) for block in first.content]
    result = {"type": "tool_result", "tool_use_id": first.content[1].id, "content": "r"}
    loop = (user("q"), assistant(content), user([result]))
    assert (await client.messages.create(**request(*loop, tools=[SEARCH], thinking=THINKING))).content
    content[0]["data"] = "Zm9yZ2Vk"
    with pytest.raises(anthropic.BadRequestError, match="Invalid `data` in `redacted_thinking` block"):
        await client.messages.create(**request(*loop, tools=[SEARCH], thinking=THINKING))


# -- usage and prompt caching -------------------------------------------------------------------------


SYSTEM_TEXT = "You are a helpful agent. " * 200  # 5,000 characters: above the 1,024-token minimum
QUESTION = "long question " * 400


async def test_cache_creation_then_read(fake, client) -> None:
    system = [cached(SYSTEM_TEXT)]
    first = await client.messages.create(**request(system=system))
    second = await client.messages.create(**request(user("hi"), assistant("Echo: hi"), user("more"), system=system))
    assert first.usage.cache_creation_input_tokens > 1024 and first.usage.cache_read_input_tokens == 0
    assert second.usage.cache_read_input_tokens == first.usage.cache_creation_input_tokens
    assert second.usage.cache_creation_input_tokens == 0
    assert second.usage.input_tokens > first.usage.input_tokens  # the uncached tail grew


async def test_moving_breakpoint_reads_the_previous_prefix(fake, client) -> None:
    first = await client.messages.create(**request(user([cached(QUESTION)])))
    history = [user([{"type": "text", "text": QUESTION}]), assistant("answer"), user([cached("next")])]
    second = await client.messages.create(**request(*history))
    assert second.usage.cache_read_input_tokens == first.usage.cache_creation_input_tokens
    assert 0 < second.usage.cache_creation_input_tokens < first.usage.cache_creation_input_tokens


async def test_a_prefix_below_the_minimum_is_not_cached(fake, client) -> None:
    system = [cached("You are a helpful agent. " * 40)]  # 250 tokens: under Sonnet's 1,024
    for _ in range(2):
        usage = (await client.messages.create(**request(system=system))).usage
        assert usage.cache_creation_input_tokens == 0 and usage.cache_read_input_tokens == 0
    # Haiku 4.5 needs 4,096 tokens: what Sonnet caches, it does not.
    usage = (await client.messages.create(**{**request(system=[cached(SYSTEM_TEXT)]), "model": "claude-haiku-4-5"})).usage
    assert usage.cache_creation_input_tokens == 0 and usage.input_tokens > 1024


async def test_tool_choice_and_thinking_key_the_message_cache(fake, client) -> None:
    """Changing either keeps tools and system cached but misses every message block."""
    system = [cached(SYSTEM_TEXT)]
    messages = [user([cached(QUESTION)])]
    first = await client.messages.create(**request(*messages, system=system, tools=[SEARCH]))
    forced = await client.messages.create(**request(*messages, system=system, tools=[SEARCH],
                                                    tool_choice={"type": "tool", "name": "web_search"}))
    system_tokens = forced.usage.cache_read_input_tokens
    assert 1024 < system_tokens < first.usage.cache_creation_input_tokens  # tools and system only
    assert forced.usage.cache_creation_input_tokens == first.usage.cache_creation_input_tokens - system_tokens
    auto = await client.messages.create(**request(*messages, system=system, tools=[SEARCH], tool_choice={"type": "auto"}))
    assert auto.usage.cache_read_input_tokens == first.usage.cache_creation_input_tokens  # absent means auto
    thinking = await client.messages.create(**request(*messages, system=system, tools=[SEARCH], thinking=THINKING))
    assert thinking.usage.cache_read_input_tokens == system_tokens


async def test_lookback_is_twenty_blocks(fake, client) -> None:
    """A breakpoint finds an earlier one's entry at most 20 blocks back; further, it misses."""
    blocks = [{"type": "text", "text": f"note {n}"} for n in range(25)]
    first = await client.messages.create(**request(user([cached(QUESTION)])))
    near = await client.messages.create(**request(user([{"type": "text", "text": QUESTION}, *blocks[:18],
                                                        cached("end")])))
    assert near.usage.cache_read_input_tokens == first.usage.cache_creation_input_tokens
    far = await client.messages.create(**request(user([{"type": "text", "text": QUESTION}, *blocks, cached("end")])))
    assert far.usage.cache_read_input_tokens == 0


async def test_count_tokens(fake, client) -> None:
    counted = await client.messages.count_tokens(model=MODEL, messages=[user("hello there")])
    created = await client.messages.create(**request(user("hello there")))
    assert counted.input_tokens == created.usage.input_tokens


# -- faults ---------------------------------------------------------------------------------------


async def test_rate_limit_surfaces_with_retry_after(fake, client) -> None:
    fake.enqueue(Fault.status(429))
    with pytest.raises(anthropic.RateLimitError) as caught:
        await client.messages.create(**request())
    assert caught.value.response.headers["retry-after"] == "1"
    assert caught.value.type == "rate_limit_error" and fake.requests[0].status == 429


async def test_sdk_retries_overloaded(fake) -> None:
    retrying = sdk(fake.base_url, max_retries=2)
    fake.enqueue(Fault.status(529, retry_after=0.01), Fault.status(500, retry_after=0.01), Reply("finally"))
    message = await retrying.messages.create(**request())
    assert message.content[0].text == "finally"
    assert [r.status for r in fake.requests] == [529, 500, 200]
    assert [r.headers["x-stainless-retry-count"] for r in fake.requests] == ["0", "1", "2"]


async def test_midstream_error_raises_while_iterating(fake, client) -> None:
    fake.enqueue(Fault.midstream_error(after_events=3, error_type="overloaded_error"))
    seen: list[str] = []
    with pytest.raises(anthropic.APIStatusError) as caught:
        async with client.messages.stream(**request()) as stream:
            async for event in stream:
                seen.append(event.type)
    assert caught.value.status_code == 200  # the HTTP status was already 200: a plain APIStatusError
    assert caught.value.type == "overloaded_error" and caught.value.api_message == "Overloaded"
    # The client can read the error before the fake's handler counts it as sent: its count
    # is read once the handler is over.
    record = await finished(fake.requests[0])
    assert seen[0] == "message_start" and record.events_sent == 4  # 3 events + the error


async def test_client_abort_of_a_slow_stream_is_noticed(fake, client) -> None:
    fake.enqueue(Reply("one two three four five six seven eight nine ten", delay=0.05))
    async with client.messages.stream(**request()) as stream:
        async for event in stream:
            if event.type == "text":
                break  # leaving the context closes the response mid-stream
    record = await finished(fake.requests[0])
    assert record.disconnected and record.events_sent < 10


async def test_hanging_stream_waits_for_the_client_to_leave(fake, client) -> None:
    fake.enqueue(Reply("never finished", hang_after_events=4))
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        async with client.messages.stream(**request()) as stream:
            async with asyncio.timeout(0.2):
                async for _ in stream:
                    pass
    record = await finished(fake.requests[0])
    assert record.disconnected and record.events_sent == 4
    assert time.monotonic() - started < pace.scaled(2)


async def test_a_lead_delay_is_silence_headers_included(fake) -> None:
    """A model that took the request and says nothing yet: not even the stream's headers
    come before `lead_delay`; then the reply streams as usual."""
    fake.enqueue(Reply("late", lead_delay=0.5))
    async with httpx.AsyncClient(base_url=fake.base_url, verify=False) as http:
        started = time.monotonic()
        async with http.stream("POST", "/v1/messages", json=request(stream=True), headers=HEADERS) as response:
            headers_after = time.monotonic() - started
            body = (await response.aread()).decode()
    assert response.status_code == 200 and 0.5 <= headers_after < 3
    assert '"text":"late"' in body and "message_stop" in body
    fake.enqueue(Reply("late", lead_delay=30))
    with pytest.raises(httpx.ReadTimeout):  # nothing at all arrives: the client's read times out
        async with httpx.AsyncClient(base_url=fake.base_url, verify=False, timeout=0.3) as http:
            await http.post("/v1/messages", json=request(stream=True), headers=HEADERS)
    record = await finished(fake.requests[1])
    assert record.disconnected and record.status is None


async def test_non_streaming_hang_notices_the_client_timing_out(fake) -> None:
    fake.enqueue(Fault.hang(after_events=0))
    impatient = sdk(fake.base_url).with_options(timeout=0.2)
    with pytest.raises(anthropic.APITimeoutError):
        await impatient.messages.create(**request())
    record = await finished(fake.requests[0])
    assert record.disconnected and record.status is None  # nothing was sent: no headers either


async def test_when_routes_concurrent_conversations(fake, client) -> None:
    def marked(tag: str):
        return lambda body: tag in json.dumps(body["messages"])

    fake.enqueue(Reply("for A", delay=0.01), when=marked("conv-A"))
    fake.enqueue(Reply("for B", delay=0.01), when=marked("conv-B"))

    async def ask(tag: str) -> str:
        async with client.messages.stream(**request(user(f"{tag}: hello"))) as stream:
            return await stream.get_final_text()

    assert await asyncio.gather(ask("conv-B"), ask("conv-A")) == ["for B", "for A"]


async def test_responder_answers_when_the_queue_is_empty(fake, client) -> None:
    fake.responder = lambda body: Reply(f"{len(body['messages'])} messages") if body.get("system") else None
    assert (await client.messages.create(**request(system="s"))).content[0].text == "1 messages"
    assert (await client.messages.create(**request())).content[0].text == "Echo: hi"


# -- default responder ---------------------------------------------------------------------------------


async def test_default_tool_directives_then_digest(fake, client) -> None:
    ask = 'Go [[tool web_search {"query": "cats"}]] and [[tool web_search {"query": "dogs"}]]'
    async with client.messages.stream(**request(user(ask), tools=[SEARCH])) as stream:
        first = await stream.get_final_message()
    text, *calls = first.content
    assert text.text == "Calling tools." and first.stop_reason == "tool_use"
    assert [c.input for c in calls] == [{"query": "cats"}, {"query": "dogs"}]
    results = [{"type": "tool_result", "tool_use_id": c.id, "content": f"about {c.input['query']}"} for c in calls]
    second = await client.messages.create(
        **request(user(ask), assistant(first.to_param()["content"]), user(results), tools=[SEARCH])
    )
    assert second.content[0].text == "Done: about cats; about dogs" and second.stop_reason == "end_turn"


async def test_default_long_slow_and_error(fake, client) -> None:
    long = await client.messages.create(**request(user("[[long 300]]")))
    assert len(long.content[0].text.split()) == 300
    cut = await client.messages.create(**{**request(user("[[long 300]]")), "max_tokens": 50})
    assert cut.stop_reason == "max_tokens" and len(cut.content[0].text) == 200

    started = time.monotonic()
    async with client.messages.stream(**request(user("[[slow 0.2]]"))) as stream:
        slow = await stream.get_final_text()
    assert len(slow.split()) == 40 and 0.15 < time.monotonic() - started < pace.scaled(1.5)

    with pytest.raises(anthropic.APIStatusError) as caught:
        async with client.messages.stream(**request(user("[[error api_error]]"))) as stream:
            await stream.get_final_message()
    assert caught.value.type == "api_error"


async def test_default_echo_summary_thinking_and_forced_tool(fake, client) -> None:
    echo = await client.messages.create(**request(user("hello")))
    assert echo.content[0].text == "Echo: hello"
    summary = await client.messages.create(**request(system="Summarize the conversation."))
    assert summary.content[0].text.startswith("Summary:")
    thought = await client.messages.create(**request(thinking=THINKING))
    assert [b.type for b in thought.content] == ["thinking", "text"]
    forced = await client.messages.create(**request(tools=[SEARCH], tool_choice={"type": "tool", "name": "web_search"}))
    assert [(b.type, b.input) for b in forced.content] == [("tool_use", {"query": "fake query"})]


# -- ways to run it -------------------------------------------------------------------------------------


async def test_astart_on_the_running_loop() -> None:
    async with FakeAnthropic() as fake:
        client = sdk(fake.base_url)
        assert (await client.messages.create(**request())).content[0].text == "Echo: hi"


async def test_standalone_process_prints_its_url() -> None:
    root = Path(__file__).resolve().parents[1]
    proc = reaper.spawn(
        [sys.executable, "-m", "tests.fakes.anthropic_fake", "--port", "0"], cwd=root, stdout=subprocess.PIPE, text=True
    )
    try:
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:")
        client = sdk(url)
        assert (await client.messages.create(**request())).content[0].text == "Echo: hi"
    finally:
        reaper.end(proc)


async def test_a_lone_surrogate_is_refused_like_the_real_api(fake) -> None:
    fake.enqueue(Reply("scripted"))
    paired = json.dumps(request(user("ok \ud83d\ude00")))  # ensure_ascii: the escapes go on the wire
    async with httpx.AsyncClient(base_url=fake.base_url) as http:
        fine = await http.post("/v1/messages", content=paired, headers=HEADERS)
        assert fine.status_code == 200, fine.text
        lone = json.dumps(request(user("hi \ud800 there")))
        response = await http.post("/v1/messages", content=lone, headers=HEADERS)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    column = lone.index("\\ud800") + 1
    assert error["message"] == (f"The request body is not valid JSON: no low surrogate in string: line 1 column"
                                f" {column} (char {column - 1})")


async def test_a_fake_that_keeps_no_log_answers_the_same_and_logs_nothing() -> None:
    """The fake in a process of its own (benchmarks, `tests.fakes.serve`) keeps no request
    log: nobody can read it there, and every body of a long run kept alive is what its
    garbage collector walks through."""
    with FakeAnthropic(keep_log=False) as quiet, FakeAnthropic() as logged:
        body = request(user("hi"))
        answers = [await post(quiet, body), await post(logged, body)]
        assert [a.status_code for a in answers] == [200, 200]
        assert answers[0].json()["content"] == answers[1].json()["content"]
        assert quiet.requests == [] and len(logged.requests) == 1

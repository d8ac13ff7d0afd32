"""The model client against the fake API: deltas, the final reply, errors and our own retry."""

from __future__ import annotations

import asyncio

import anthropic
import pytest
from anthropic._models import FinalRequestOptions

from chat_agent.config import Settings
from chat_agent.model import (AnthropicClient as ModelClient, LLMError, ModelReply, ModelRequest, TextDelta,
                              ThinkingDelta, ToolInputDelta)
from chat_agent.model.anthropic import STREAM_PATH
from tests.fakes.anthropic_fake import Fault, Reply, Text, Thinking, ToolUse


def client(fake, retries: int = 2) -> ModelClient:
    settings = Settings(anthropic_api_key=fake.api_key, anthropic_base_url=fake.base_url, llm_max_retries=retries)
    return ModelClient(settings, backoff=0.01)


def request() -> ModelRequest:
    return ModelRequest(model="claude-sonnet-4-6", max_tokens=100, messages=[{"role": "user", "content": "hi"}])


async def collect(model: ModelClient) -> list:
    return [item async for item in model.stream(request())]


async def test_stream_yields_deltas_then_reply(fake_anthropic):
    model = client(fake_anthropic)
    fake_anthropic.enqueue(Reply([Text("Hello world"), ToolUse("web_search", {"query": "q"})], chunk_size=3))
    items = await collect(model)
    assert "".join(i.text for i in items if isinstance(i, TextDelta)) == "Hello world"
    reply = items[-1]
    assert isinstance(reply, ModelReply) and reply.stop_reason == "tool_use"
    assert reply.content[0] == {"type": "text", "text": "Hello world"}
    assert reply.content[1]["input"] == {"query": "q"} and reply.usage.output_tokens > 0
    await model.close()


async def test_each_streamed_call_sends_what_the_sdk_would_build_for_it(fake_anthropic):
    """The streamed calls after the first reuse its request but for the body (the SDK's
    headers, path and timeout, built once): each must still be what the SDK itself builds."""
    model = client(fake_anthropic, retries=0)
    calls = [ModelRequest(model="claude-sonnet-4-6", max_tokens=100, messages=[{"role": "user", "content": text}])
             for text in ("hi", "and now something longer")]
    for call, text in zip(calls, ("one", "two")):
        fake_anthropic.enqueue(Reply(text))
        assert [i for i in [item async for item in model.stream(call)] if isinstance(i, ModelReply)]
    first, second = fake_anthropic.requests[-2:]
    assert second["messages"] == [{"role": "user", "content": "and now something longer"}]
    assert {**first.headers, "content-length": ""} == {**second.headers, "content-length": ""}
    assert first.headers["user-agent"].startswith("AsyncAnthropic/Python ")
    client_ = model._streaming  # what the SDK builds for the second call, on the same client
    options = FinalRequestOptions.construct(method="post", url=STREAM_PATH, content=calls[1].body(stream=True))
    built, ours = anthropic.AsyncAnthropic._build_request(client_, options), client_._build_request(options)
    assert (ours.method, ours.url, ours.extensions, ours.content) == (built.method, built.url, built.extensions,
                                                                     built.content)
    assert ours.headers.multi_items() == built.headers.multi_items()
    await model.close()


async def test_midstream_overload_before_output_is_retried_but_not_after(fake_anthropic):
    model = client(fake_anthropic)
    fake_anthropic.enqueue(Fault.midstream_error(after_events=1), Reply("ok"))
    assert isinstance((await collect(model))[-1], ModelReply)
    fake_anthropic.enqueue(Fault.midstream_error(after_events=5, reply=Reply("partial text", chunk_size=2)))
    with pytest.raises(LLMError) as caught:
        await collect(model)
    assert caught.value.code == "llm_error" and "overloaded" in caught.value.message
    await model.close()


async def test_retries_are_bounded(fake_anthropic):
    model = client(fake_anthropic, retries=2)
    before = len(fake_anthropic.requests)
    fake_anthropic.enqueue(*[Fault.midstream_error(after_events=1)] * 3)
    with pytest.raises(LLMError):
        await collect(model)
    assert len(fake_anthropic.requests) - before == 3
    await model.close()


@pytest.mark.parametrize("fault, code", [(Fault.status(429, retry_after=0), "rate_limited"),
                                         (Fault.status(529), "llm_error"),
                                         (Fault.status(401, message="invalid x-api-key"), "llm_error")])
async def test_status_errors(fake_anthropic, fault, code):
    model = client(fake_anthropic, retries=0)
    fake_anthropic.enqueue(fault)
    with pytest.raises(LLMError) as caught:
        await collect(model)
    assert caught.value.code == code
    await model.close()


async def test_invalid_history_is_a_readable_error(fake_anthropic):
    model = client(fake_anthropic)
    bad = ModelRequest(model="m", max_tokens=10, messages=[
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "x", "input": {}}]},
        {"role": "user", "content": "no result"}])
    with pytest.raises(LLMError) as caught:
        await collect_request(model, bad)
    assert "tool_use" in caught.value.message and "400" in caught.value.message
    await model.close()


async def collect_request(model: ModelClient, req: ModelRequest) -> list:
    return [item async for item in model.stream(req)]


# ---- shapes the real API sends that a plain accumulation gets wrong -------------------------------


def thinking_request() -> ModelRequest:
    return ModelRequest(model="claude-sonnet-4-6", max_tokens=3000, thinking_budget=1024,
                        messages=[{"role": "user", "content": "hi"}])


async def test_thinking_cut_by_max_tokens_is_shown_but_not_kept(fake_anthropic):
    model = client(fake_anthropic)
    fake_anthropic.enqueue(Reply([Thinking("Signed first."), Text("Then"), Thinking("cut short")], cut=True))
    items = [item async for item in model.stream(thinking_request())]
    assert "".join(i.text for i in items if isinstance(i, ThinkingDelta)) == "Signed first.cut short"
    reply = items[-1]
    assert reply.stop_reason == "max_tokens"
    assert [b["type"] for b in reply.content] == ["thinking", "text"]  # the unsigned block is not kept
    assert reply.content[0]["signature"]
    await model.close()


async def test_broken_tool_json_is_reported_and_the_stream_goes_on(fake_anthropic):
    model = client(fake_anthropic)
    broken = '{"query": "paris", "unit": celsius}'
    fake_anthropic.enqueue(Reply([ToolUse("web_search", raw_json=broken), ToolUse("web_search", {"query": "ok"}),
                                  Text("After.")], chunk_size=4))
    items = await collect(model)
    pieces = "".join(i.piece for i in items if isinstance(i, ToolInputDelta) and i.tool_id == items[-1].content[0]["id"])
    reply = items[-1]
    assert pieces == broken
    first, second, text = reply.content
    assert first["input"] == {} and reply.invalid_calls == {first["id"]: broken}
    assert second["input"] == {"query": "ok"} and text == {"type": "text", "text": "After."}
    assert reply.stop_reason == "tool_use" and reply.usage.output_tokens > 1
    await model.close()


async def test_a_closed_call_with_unfinished_json_is_invalid(fake_anthropic):
    model = client(fake_anthropic)
    fake_anthropic.enqueue(Reply([ToolUse("web_search", raw_json='{"query": "unfinished')]))
    reply = (await collect(model))[-1]
    assert list(reply.invalid_calls.values()) == ['{"query": "unfinished']
    await model.close()


async def test_a_call_cut_by_the_output_limit_keeps_the_input_written_so_far(fake_anthropic):
    # Its JSON is parsed once the stream ends, in the SDK's partial mode, as the SDK would
    # have parsed it piece by piece: what was written of the input, no more.
    model = client(fake_anthropic)
    fake_anthropic.enqueue(Reply([Text("Writing."), ToolUse("web_search", raw_json='{"query": "paris", "num_res')],
                                 cut=True, chunk_size=3))
    reply = (await collect(model))[-1]
    assert reply.stop_reason == "max_tokens"
    text, call = reply.content
    assert text == {"type": "text", "text": "Writing."}
    assert call["input"] == {"query": "paris"} and reply.invalid_calls == {}
    await model.close()


async def test_a_long_tool_input_in_small_pieces_arrives_whole(fake_anthropic):
    model = client(fake_anthropic)
    content = "line with \"quotes\", ünïcödé and \\ backslashes\n" * 2000
    fake_anthropic.enqueue(Reply([ToolUse("web_search", {"query": content})]))  # pieces of 1-16 characters
    items = await collect(model)
    assert items[-1].content[0]["input"] == {"query": content}
    assert sum(isinstance(i, ToolInputDelta) for i in items) > 5000
    await model.close()


async def test_a_call_without_arguments_is_valid_and_its_input_empty(fake_anthropic):
    # The API streams such a call's input as one empty piece: nothing to parse, not broken JSON.
    model = client(fake_anthropic)
    fake_anthropic.enqueue(Reply([ToolUse("web_search", {}), ToolUse("fetch_page", {"url": "u"})]))
    reply = (await collect(model))[-1]
    assert [c["input"] for c in reply.content] == [{}, {"url": "u"}] and reply.invalid_calls == {}
    await model.close()


async def test_refusal_detail_comes_from_stop_details(fake_anthropic):
    model = client(fake_anthropic)
    details = {"type": "refusal", "category": "cyber", "explanation": "This request was refused due to policy."}
    fake_anthropic.enqueue(Reply([Text("")], stop_reason="refusal", stop_details=details),
                           Reply("No.", stop_reason="refusal", stop_details={**details, "explanation": None}))
    reply = (await collect(model))[-1]
    assert (reply.stop_reason, reply.stop_detail, reply.content) == ("refusal", details["explanation"], [])
    assert (await model.call(request())).stop_detail is None
    await model.close()


async def test_pooled_connections_are_let_go_before_a_5s_keepalive_server_closes_them(fake_anthropic):
    """The fake runs on uvicorn, which closes a connection idle for 5 s (as do Node and most
    proxies in front of a model API). A connection reused just before that, by the client's
    clock, meets a server that already closed it: "Server disconnected", with no retry here."""
    model = client(fake_anthropic)

    async def burst() -> list[BaseException | ModelReply]:
        return await asyncio.gather(*(model.call(request()) for _ in range(50)), return_exceptions=True)

    assert all(isinstance(r, ModelReply) for r in await burst())
    await asyncio.sleep(4.95)
    failed = [r for r in await burst() if not isinstance(r, ModelReply)]
    assert failed == []
    await model.close()

"""The model client against the fake API: deltas, the final reply, errors and our own retry."""

from __future__ import annotations

import pytest

from chat_agent.config import Settings
from chat_agent.model import AnthropicClient as ModelClient, LLMError, ModelReply, ModelRequest, TextDelta
from tests.fakes.anthropic_fake import Fault, Reply, Text, ToolUse


def client(fake, **kw) -> ModelClient:
    settings = Settings(anthropic_api_key=fake.api_key, anthropic_base_url=fake.base_url, llm_max_retries=0)
    return ModelClient(settings, backoff=0.01, **kw)


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
    model = client(fake_anthropic, midstream_retries=2)
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
    model = client(fake_anthropic)
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

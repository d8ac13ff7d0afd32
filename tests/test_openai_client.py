"""The OpenAI-compatible client against the fake Chat Completions API (real HTTP on loopback):
the translation of every block the loop sends, what compatible servers do differently,
errors, and model names by provider."""

from __future__ import annotations

import asyncio
import json
from typing import Any, Iterator

import pytest

from chat_agent.config import ConfigError, Settings
from chat_agent.model import LLMError, ModelReply, ModelRequest, TextDelta, ThinkingDelta, ToolInputDelta, model_client
from chat_agent.model.openai_stream import ChunkAccumulator
from tests.fakes.openai_fake import Call, Fault, FakeOpenAI, Reply

SEARCH = {"name": "web_search", "description": "Search the web.", "cache_control": {"type": "ephemeral"},
          "input_schema": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


@pytest.fixture
async def client(fake: FakeOpenAI):
    fake.drop_queue()
    router = model_client(Settings(openai_api_key=fake.api_key, openai_base_url=fake.base_url, model="openai:m",
                                   small_model="openai:m", llm_max_retries=0))
    yield router
    await router.close()


def request(messages: list[dict[str, Any]], **extra: Any) -> ModelRequest:
    return ModelRequest(model="openai:m", messages=messages, **{"max_tokens": 512, **extra})


async def collect(client, req: ModelRequest) -> list[Any]:
    return [item async for item in client.stream(req)]


async def test_every_block_the_loop_sends_is_translated_and_accepted(client, fake):
    """Images, documents, search results, tool results (errors and images among them),
    thinking and cache breakpoints: the fake validates as the real API does."""
    history = [
        {"role": "user", "content": [
            {"type": "text", "text": "Look at these."},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
            {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.png"}},
            {"type": "document", "title": "notes.txt", "source": {"type": "text", "media_type": "text/plain",
                                                                  "data": "Plain notes."}},
            {"type": "document", "title": "paper.pdf", "source": {"type": "base64", "media_type": "application/pdf",
                                                                  "data": "JVBERi0="}},
            {"type": "text", "text": "Thanks.", "cache_control": {"type": "ephemeral"}}]},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "hmm", "signature": "sig"},
            {"type": "text", "text": "Searching twice."},
            {"type": "tool_use", "id": "toolu_a", "name": "web_search", "input": {"query": "a"}},
            {"type": "tool_use", "id": "toolu_b", "name": "web_search", "input": {"query": "b"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_a", "content": [
                {"type": "text", "text": "a found"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
                {"type": "search_result", "source": "https://a.example", "title": "A",
                 "content": [{"type": "text", "text": "about a"}]}]},
            {"type": "tool_result", "tool_use_id": "toolu_b", "content": "b failed", "is_error": True},
            {"type": "text", "text": "And now?", "cache_control": {"type": "ephemeral"}}]},
    ]
    fake.enqueue(Reply("Fine."))
    items = await collect(client, request(history, system=[{"type": "text", "text": "Be brief.",
                                                            "cache_control": {"type": "ephemeral"}}],
                                          tools=[SEARCH], tool_choice={"type": "any"}))
    assert isinstance(items[-1], ModelReply) and items[-1].content == [{"type": "text", "text": "Fine."}]
    sent = fake.requests[-1]
    assert "cache_control" not in json.dumps(sent) and "thinking" not in json.dumps(sent)
    assert sent["tool_choice"] == "required" and sent["max_tokens"] == 512
    assert sent["tools"] == [{"type": "function", "function": {"name": "web_search", "description": "Search the web.",
                                                               "parameters": SEARCH["input_schema"]}}]
    roles = [m["role"] for m in sent["messages"]]
    assert roles == ["system", "user", "assistant", "tool", "tool", "user"]
    first = sent["messages"][1]["content"]
    assert [p["type"] for p in first] == ["text", "image_url", "image_url", "text", "text", "text"]
    assert first[1]["image_url"]["url"].startswith("data:image/png;base64,")
    assert "Plain notes." in first[3]["text"] and "cannot read PDF" in first[4]["text"]
    assistant = sent["messages"][2]
    assert assistant["content"] == "Searching twice." and len(assistant["tool_calls"]) == 2
    tool_a, tool_b, after = sent["messages"][3:]
    assert tool_a["tool_call_id"] == "toolu_a" and "a found" in tool_a["content"] and "about a" in tool_a["content"]
    assert tool_b["content"] == "Error: b failed"
    # the tool's image follows the tool messages, with the user's own words
    assert [p["type"] for p in after["content"]] == ["image_url", "text"]


async def test_forced_tool_streamed_arguments_and_parallel_calls(client, fake):
    fake.enqueue(Reply(calls=[Call("web_search", {"query": "alpha beta"}), Call("web_search", {"query": "gamma"})],
                       chunk_size=3))
    items = await collect(client, request([{"role": "user", "content": "go"}], tools=[SEARCH],
                                          tool_choice={"type": "tool", "name": "web_search"}))
    assert fake.requests[-1]["tool_choice"] == {"type": "function", "function": {"name": "web_search"}}
    reply = items[-1]
    assert reply.stop_reason == "tool_use" and [b["input"] for b in reply.content] == [{"query": "alpha beta"},
                                                                                        {"query": "gamma"}]
    pieces = [i for i in items if isinstance(i, ToolInputDelta)]
    by_id: dict[str, str] = {}
    for piece in pieces:
        by_id[piece.tool_id] = by_id.get(piece.tool_id, "") + piece.piece
    assert by_id == {b["id"]: json.dumps(b["input"]) for b in reply.content}
    assert len(pieces) > 4  # streamed as written, in pieces


async def test_broken_arguments_refusal_filter_and_length(client, fake):
    fake.enqueue(Reply(calls=[Call("web_search", raw='{"query": "unclosed')]))
    reply = (await collect(client, request([{"role": "user", "content": "go"}], tools=[SEARCH])))[-1]
    call = reply.content[0]
    assert call["input"] == {} and reply.invalid_calls == {call["id"]: '{"query": "unclosed'}
    fake.enqueue(Reply(refusal="I can't help with that."))
    reply = (await collect(client, request([{"role": "user", "content": "bad"}])))[-1]
    assert reply.stop_reason == "refusal" and reply.stop_detail == "I can't help with that."
    fake.enqueue(Reply("partial", finish_reason="content_filter"))
    reply = (await collect(client, request([{"role": "user", "content": "bad"}])))[-1]
    assert reply.stop_reason == "refusal" and "content filter" in reply.stop_detail
    fake.enqueue(Reply("cut sho", finish_reason="length"))
    assert (await collect(client, request([{"role": "user", "content": "long"}])))[-1].stop_reason == "max_tokens"


async def test_reasoning_is_shown_as_thinking_and_thinking_asked_of_a_plain_model_is_noted(client, fake):
    fake.enqueue(Reply("42", reasoning="Let me count."))
    items = await collect(client, request([{"role": "user", "content": "q"}], thinking_budget=1024,
                                          max_tokens=1024 + 512))
    assert [i.text for i in items if isinstance(i, ThinkingDelta)] == ["Let me c", "ount."]
    assert items[-1].notes == () and items[-1].content == [{"type": "text", "text": "42"}]  # not kept: unsigned
    assert fake.requests[-1]["max_tokens"] == 512  # no budget for thinking it will not do
    fake.enqueue(Reply("43"))
    items = await collect(client, request([{"role": "user", "content": "q"}], thinking_budget=1024,
                                          max_tokens=1024 + 512))
    assert "Thinking is not available" in items[-1].notes[0]


async def test_usage_counts_cached_tokens_apart(client, fake):
    long = [{"role": "user", "content": "x " * 5000}]
    fake.enqueue(Reply("one"), Reply("two"))
    first = (await collect(client, request(long)))[-1].usage
    second = (await collect(client, request(long + [{"role": "assistant", "content": "one"},
                                                     {"role": "user", "content": "more"}])))[-1].usage
    assert first.cache_read_tokens == 0 and second.cache_read_tokens >= 1024
    assert second.cache_read_tokens % 128 == 0 and second.input_tokens > 0
    fake.enqueue(Reply("plain", usage={"prompt_tokens": 2000, "completion_tokens": 7, "cached_tokens": 1536}))
    usage = (await client.call(request([{"role": "user", "content": "q"}]))).usage
    assert (usage.input_tokens, usage.cache_read_tokens, usage.output_tokens) == (464, 1536, 7)


async def test_what_the_api_refuses_becomes_a_readable_llm_error(client, fake):
    orphan = [{"role": "user", "content": "q"},
              {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_never", "content": "x"}]}]
    with pytest.raises(LLMError) as caught:
        await collect(client, request(orphan))
    assert caught.value.code == "llm_error" and "400" in caught.value.message and "tool_calls" in caught.value.message
    bad_tool = {**SEARCH, "name": "web search"}
    with pytest.raises(LLMError, match="400"):
        await collect(client, request([{"role": "user", "content": "q"}], tools=[bad_tool]))
    fake.enqueue(Fault(429, retry_after=0))
    with pytest.raises(LLMError) as caught:
        await client.complete(request([{"role": "user", "content": "q"}]))
    assert caught.value.code == "rate_limited"


async def test_a_429_is_retried_after_retry_after_and_a_wrong_key_names_its_variable(fake):
    fake.drop_queue()
    retrying = model_client(Settings(openai_api_key=fake.api_key, openai_base_url=fake.base_url, model="openai:m",
                                     llm_max_retries=1))
    fake.enqueue(Fault(429, retry_after=0.3), Reply("after the wait"))
    loop = asyncio.get_running_loop()
    started = loop.time()
    assert await retrying.complete(request([{"role": "user", "content": "q"}])) == "after the wait"
    assert loop.time() - started >= 0.3
    await retrying.close()
    wrong = model_client(Settings(openai_api_key="sk-wrong-secret", openai_base_url=fake.base_url, model="openai:m",
                                  llm_max_retries=0))
    with pytest.raises(LLMError) as caught:
        await collect(wrong, request([{"role": "user", "content": "q"}]))
    assert "OPENAI_API_KEY" in caught.value.message and "sk-wrong" not in caught.value.message
    await wrong.close()


def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    """A chunk as the stream gives it: the API's JSON."""
    return {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def test_what_compatible_servers_do_differently():
    """Ollama says `stop` for a reply with calls and may send a whole call in one piece
    without an id; some servers send a call's arguments before its name."""
    chunks = ChunkAccumulator()
    items = chunks.feed(chunk({"tool_calls": [{"index": 0, "function": {"name": "web_search",
                                                                         "arguments": '{"query": "x"}'}}]}))
    items += chunks.feed(chunk({"tool_calls": [{"index": 1, "function": {"arguments": '{"query": '}}]}))
    assert len(items) == 1  # the second call has no name yet: its piece waits
    items += chunks.feed(chunk({"tool_calls": [{"index": 1, "id": "call_2", "function": {"name": "web_search",
                                                                                          "arguments": '"y"}'}}]}))
    items += chunks.feed(chunk({"reasoning": "thought"}))
    chunks.feed(chunk({}, "stop"))
    reply = chunks.reply()
    assert reply.stop_reason == "tool_use" and [b["input"] for b in reply.content] == [{"query": "x"}, {"query": "y"}]
    assert reply.content[0]["id"].startswith("call_") and reply.content[1]["id"] == "call_2"
    assert [i.piece for i in items if isinstance(i, ToolInputDelta) and i.tool_id == "call_2"] == ['{"query": ', '"y"}']
    assert isinstance(items[-1], ThinkingDelta) and not [i for i in items if isinstance(i, TextDelta)]


def test_model_names_carry_their_provider():
    with pytest.raises(ConfigError, match="unknown provider 'llama3'.*openai:llama3:8b"):
        Settings.from_env({"CHAT_AGENT_MODEL": "llama3:8b"})
    with pytest.raises(ConfigError, match="CHAT_AGENT_ALLOWED_MODELS"):
        Settings.from_env({"CHAT_AGENT_ALLOWED_MODELS": "claude-x,mistral:7b"})
    with pytest.raises(ConfigError, match="names no model"):
        Settings.from_env({"CHAT_AGENT_SMALL_MODEL": "openai:"})
    settings = Settings.from_env({"CHAT_AGENT_MODEL": "openai:llama3.2:3b",
                                  "CHAT_AGENT_ALLOWED_MODELS": "openai:llama3.2:3b,claude-x"})
    assert settings.allowed("anthropic:claude-x") == "claude-x" and settings.allowed("openai:claude-x") is None
    assert settings.providers() == {"openai": ["openai:llama3.2:3b"], "anthropic": ["claude-haiku-4-5", "claude-x"]}
    router = model_client(settings)
    assert router.configured is False and "OPENAI_API_KEY" in router.unavailable("openai:llama3.2:3b")
    assert "ANTHROPIC_API_KEY" in router.unavailable("claude-x")

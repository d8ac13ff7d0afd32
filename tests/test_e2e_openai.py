"""The real server on an OpenAI-compatible model (`CHAT_AGENT_MODEL=openai:...`), pointed at
a fake Chat Completions API through the SDK's own OPENAI_BASE_URL / OPENAI_API_KEY: what a
client sees is the same as on Anthropic's models. The fake refuses a history the real API
would refuse (a `tool` message answering no call, a call left unanswered), so every next
turn here also checks that the history stayed valid."""

from __future__ import annotations

import json
import time
from typing import Iterator

import pytest

from tests import pace
from tests.conftest import server_env
from tests.fakes.anthropic_fake import Reply as AnthropicReply
from tests.fakes.openai_fake import Call, Fault, FakeOpenAI, Reply
from tests.support import ServerProcess, connect, recv, send, text_of, until

MAIN, SMALL = "gpt-test", "gpt-small"  # as the fake sees them: the provider prefix is not sent


def is_main(body: dict) -> bool:
    return body["model"] == MAIN


@pytest.fixture(scope="module")
def fake_openai() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as fake:
        yield fake


def openai_env(fake_anthropic, fake_exa, fake_openai: FakeOpenAI, **extra: str) -> dict[str, str]:
    return server_env(fake_anthropic, fake_exa, OPENAI_BASE_URL=fake_openai.base_url,
                      OPENAI_API_KEY=fake_openai.api_key, CHAT_AGENT_MODEL=f"openai:{MAIN}",
                      CHAT_AGENT_SMALL_MODEL=f"openai:{SMALL}", **extra)


@pytest.fixture(scope="module")
def server(tmp_path_factory, fake_anthropic, fake_exa, fake_openai) -> Iterator[ServerProcess]:
    env = openai_env(fake_anthropic, fake_exa, fake_openai,
                     CHAT_AGENT_ALLOWED_MODELS=f"openai:{MAIN},openai:{SMALL},claude-test")
    with ServerProcess(tmp_path_factory.mktemp("openai"), env) as proc:
        yield proc


@pytest.fixture(autouse=True)
def _clean(fake_openai: FakeOpenAI, fake_exa) -> Iterator[None]:
    fake_openai.drop_queue()
    yield
    fake_openai.drop_queue()
    fake_exa.delay = 0.0


def main_bodies(fake: FakeOpenAI) -> list[dict]:
    return [b for b in fake.requests if is_main(b)]


async def turn(ws, content: str, **extra) -> list[dict]:
    await send(ws, type="message", content=content, **extra)
    return await until(ws, "done", timeout=30)


async def test_text_tools_parallel_tools_usage_and_title(server, fake_openai, fake_exa):
    status, health = server.get("/health")
    assert health["providers"]["openai"] == {"configured": True, "models": [f"openai:{MAIN}", f"openai:{SMALL}"],
                                             "baseUrl": fake_openai.base_url}
    assert health["providers"]["anthropic"]["configured"] is True
    ws, session = await connect(server)
    fake_openai.enqueue(Reply("Hello from an OpenAI-compatible model.", chunk_size=4, delay=0.06), when=is_main)
    fake_openai.enqueue(Reply(calls=[Call("set_title", {"title": "Greeting The Model"})]),
                        when=lambda body: body["model"] == SMALL)
    frames = await turn(ws, "hi there")
    assert text_of(frames) == "Hello from an OpenAI-compatible model."
    assert len([f for f in frames if f["type"] == "content_chunk"]) >= 3  # streamed, not one blob
    done = frames[-1]
    assert done["stopReason"] == "end_turn" and done["usage"]["inputTokens"] > 0 and done["usage"]["outputTokens"] > 0
    sent = main_bodies(fake_openai)[-1]
    assert sent["stream"] is True and sent["stream_options"] == {"include_usage": True}
    assert sent["messages"][0]["role"] == "system" and sent["messages"][-1] == {"role": "user", "content": "hi there"}
    assert {t["function"]["name"] for t in sent["tools"]} >= {"generate_artifact", "web_search"}
    assert "cache_control" not in json.dumps(sent) and sent["max_tokens"] > 0
    # the title came from the small model, on the same provider, through a forced tool call
    title = (await until(ws, "title"))[-1]
    assert title["title"] == "Greeting The Model"
    titled = [b for b in fake_openai.requests if b["model"] == SMALL][-1]
    assert titled["tool_choice"] == {"type": "function", "function": {"name": "set_title"}} and not titled.get("stream")

    # one tool, then two at once; the second turn's prompt prefix is cached
    fake_openai.enqueue(Reply("Let me look.", calls=[Call("web_search", {"query": "alpha"})]), Reply("Found alpha."),
                        when=is_main)
    frames = await turn(ws, "search alpha")
    starts = [f for f in frames if f["type"] == "tool_start"]
    ends = [f for f in frames if f["type"] == "tool_end"]
    assert [s["input"] for s in starts] == [{"query": "alpha"}] and not ends[0]["isError"]
    assert text_of(frames) == "Let me look.Found alpha."
    assert frames[-1]["usage"]["cacheReadTokens"] > 0  # prompt_tokens_details.cached_tokens
    answered = main_bodies(fake_openai)[-1]["messages"]
    assert answered[-2]["role"] == "assistant" and answered[-2]["tool_calls"][0]["function"]["name"] == "web_search"
    assert answered[-1]["role"] == "tool" and answered[-1]["tool_call_id"] == answered[-2]["tool_calls"][0]["id"]
    assert "alpha" in answered[-1]["content"]

    # Each search takes longer than everything else in the turn, even on a busy machine: one
    # after the other they would take two delays at least.
    fake_exa.delay = pace.scaled(1.5)
    fake_openai.enqueue(Reply(calls=[Call("web_search", {"query": "beta"}), Call("web_search", {"query": "gamma"})]),
                        Reply("Both found."), when=is_main)
    started = time.monotonic()
    frames = await turn(ws, "compare beta and gamma")
    assert time.monotonic() - started < 2 * fake_exa.delay  # the two searches ran at once, not one after the other
    starts = [f for f in frames if f["type"] == "tool_start"]
    ends = [f for f in frames if f["type"] == "tool_end"]
    assert {s["input"]["query"] for s in starts} == {"beta", "gamma"}
    first_end = min(frames.index(e) for e in ends)
    assert all(frames.index(s) < first_end for s in starts)  # they ran at once
    assert not any(e["isError"] for e in ends)
    sent = main_bodies(fake_openai)[-1]["messages"]
    assert [m["role"] for m in sent[-3:]] == ["assistant", "tool", "tool"]

    # thinking asked of a model without it: the turn runs without, and `done` says so
    fake_openai.enqueue(Reply("Plain answer."), when=is_main)
    frames = await turn(ws, "think hard", settings={"thinking": True})
    assert not [f for f in frames if f["type"] == "thinking_chunk"]
    assert frames[-1]["stopReason"] == "end_turn" and "Thinking is not available" in frames[-1]["detail"]
    stored = server.get(f"/api/conversations/{session['conversationId']}")[1]
    assert [m["status"] for m in stored["messages"]] == ["complete"] * 8
    await ws.close()


async def test_artifact_streams_from_partial_arguments(server, fake_openai):
    ws, session = await connect(server)
    content = "# Sea notes\n\n" + "The tide comes in and goes out again. " * 12
    fake_openai.enqueue(Reply(calls=[Call("generate_artifact", {"title": "Sea", "type": "text", "content": content})],
                              chunk_size=16, delay=0.01), Reply("Written."), when=is_main)
    frames = await turn(ws, "write about the sea")
    kinds = [f["type"] for f in frames]
    chunks = [f for f in frames if f["type"] == "artifact_chunk"]
    assert len(chunks) >= 2 and "".join(c["content"] for c in chunks) == content
    assert kinds.index("artifact_chunk") < kinds.index("tool_start") < kinds.index("tool_end")
    start = next(f for f in frames if f["type"] == "tool_start")
    assert {c["toolId"] for c in chunks} == {start["toolId"]}
    _, snapshot = await connect(server, session["conversationId"])
    assert snapshot["artifact"]["current"]["content"] == content
    await ws.close()


async def test_abort_mid_stream_and_mid_tool_then_the_history_is_still_valid(server, fake_openai, fake_exa):
    ws, session = await connect(server)
    left = fake_openai.left
    fake_openai.enqueue(Reply("word " * 100, chunk_size=5, hang_after=6), when=is_main)
    await send(ws, type="message", content="write a lot")
    seen = [await recv(ws)]  # what came before the model hung, merged in one frame or two
    assert seen[0]["type"] == "content_chunk"
    started = time.monotonic()
    await send(ws, type="abort")
    frames = seen + await until(ws, "done")
    assert frames[-1]["stopReason"] == "aborted" and time.monotonic() - started < pace.scaled(1.0)
    shown = text_of(frames).rstrip()  # what the user saw of the stopped reply
    assert shown.startswith("word")
    for _ in range(50):  # the HTTP stream was closed: the fake saw its client leave
        if fake_openai.left > left:
            break
        time.sleep(0.02)
    assert fake_openai.left == left + 1

    fake_exa.delay = 30
    fake_openai.enqueue(Reply(calls=[Call("web_search", {"query": "slow"})]), when=is_main)
    await send(ws, type="message", content="search slowly")
    await until(ws, "tool_start")
    started = time.monotonic()
    await send(ws, type="abort")
    frames = await until(ws, "done")
    assert time.monotonic() - started < pace.scaled(1.0) and frames[-1]["stopReason"] == "aborted"
    assert [f["isError"] for f in frames if f["type"] == "tool_end"] == [True]

    fake_openai.enqueue(Reply("Recovered."), when=is_main)
    frames = await turn(ws, "never mind")
    assert frames[-1]["stopReason"] == "end_turn" and text_of(frames) == "Recovered."
    sent = main_bodies(fake_openai)[-1]["messages"]
    stopped = [m for m in sent if m["role"] == "assistant" and "stopped" in (m.get("content") or "")]
    assert stopped and stopped[0]["content"].startswith(shown)
    cancelled = [m for m in sent if m["role"] == "tool"][-1]
    assert cancelled["content"].startswith("Error: ") and "Cancelled" in cancelled["content"]
    stored = server.get(f"/api/conversations/{session['conversationId']}")[1]
    assert [m["status"] for m in stored["messages"] if m["role"] == "assistant"] == ["aborted", "aborted", "complete"]
    await ws.close()


async def test_errors_and_a_broken_stream(server, fake_openai):
    ws, _ = await connect(server)
    # the SDK retries 429 and 5xx once (CHAT_AGENT_LLM_MAX_RETRIES=1)
    for fault, code in ((Fault(429, retry_after=0), "rate_limited"), (Fault(500), "llm_error")):
        fake_openai.enqueue(fault, fault, when=is_main)
        frames = await turn(ws, "hello")
        errors = [f for f in frames if f["type"] == "error"]
        assert [e["code"] for e in errors] == [code] and frames[-1]["stopReason"] == "error"
        assert "Traceback" not in errors[0]["message"] and fake_openai.api_key not in errors[0]["message"]
    # a connection that breaks before any output is tried again; one that breaks later is an error
    fake_openai.enqueue(Fault(after_chunks=1), Reply("Second try worked."), when=is_main)
    frames = await turn(ws, "again")
    assert text_of(frames) == "Second try worked." and frames[-1]["stopReason"] == "end_turn"
    fake_openai.enqueue(Fault(after_chunks=5), when=is_main)
    frames = await turn(ws, "once more")
    assert [f["code"] for f in frames if f["type"] == "error"] == ["llm_error"]
    assert text_of(frames) and frames[-1]["stopReason"] == "error"
    fake_openai.enqueue(Reply("Back."), when=is_main)
    assert (await turn(ws, "and now"))[-1]["stopReason"] == "end_turn"
    await ws.close()


async def test_the_model_of_each_message_picks_its_provider(server, fake_openai, fake_anthropic):
    ws, _ = await connect(server)
    fake_anthropic.enqueue(AnthropicReply("From Anthropic."))
    frames = await turn(ws, "who are you", settings={"model": "claude-test"})
    assert text_of(frames) == "From Anthropic." and fake_anthropic.last_main.body["model"] == "claude-test"
    fake_openai.enqueue(Reply("From OpenAI."), when=is_main)
    frames = await turn(ws, "and you", settings={"model": f"openai:{MAIN}"})
    assert text_of(frames) == "From OpenAI."
    # the whole history, Anthropic's reply included, went to the OpenAI-compatible API
    sent = main_bodies(fake_openai)[-1]["messages"]
    assert {"role": "assistant", "content": "From Anthropic."} in sent
    fake_anthropic.enqueue(AnthropicReply("Anthropic again."))
    frames = await turn(ws, "explicit prefix", settings={"model": "anthropic:claude-test"})
    assert text_of(frames) == "Anthropic again."
    await send(ws, type="message", content="x", settings={"model": "openai:not-allowed"})
    error = (await until(ws, "error"))[-1]
    assert error["code"] == "invalid_frame" and "not available" in error["message"]
    await ws.close()


async def test_summary_on_the_small_model_and_a_provider_without_its_key(tmp_path, fake_anthropic, fake_exa,
                                                                         fake_openai):
    """One server (starting one is slow): its Anthropic key is missing, and it summarizes early."""
    env = openai_env(fake_anthropic, fake_exa, fake_openai, CHAT_AGENT_SUMMARY_CHARS="3000", ANTHROPIC_API_KEY="",
                     CHAT_AGENT_ALLOWED_MODELS=f"openai:{MAIN},claude-test")
    server = ServerProcess(tmp_path / "summary", env).start()
    try:
        health = server.get("/health")[1]
        assert health["providers"]["anthropic"] == {"configured": False, "models": ["claude-test"],
                                                    "missing": "ANTHROPIC_API_KEY"}
        assert health["providers"]["openai"]["configured"] is True
        ws, session = await connect(server)
        anthropic_calls = len(fake_anthropic.requests)
        await send(ws, type="message", content="hi", settings={"model": "claude-test"})
        error = (await until(ws, "error"))[-1]
        assert error["code"] == "llm_error" and "ANTHROPIC_API_KEY" in error["message"]
        assert len(fake_anthropic.requests) == anthropic_calls  # refused before any call, nothing stored:
        assert server.get(f"/api/conversations/{session['conversationId']}")[1]["messages"] == []

        summarized = False
        for i in range(6):
            frames = await turn(ws, f"message {i} " + "z" * 400)
            assert frames[-1]["stopReason"] == "end_turn"
            summarized = summarized or any(f["type"] == "context_update" and f["summarized"] for f in frames)
        assert summarized
        summaries = [b for b in fake_openai.requests if b["model"] == SMALL and not b.get("tools")]
        assert summaries and "message 0" in summaries[0]["messages"][-1]["content"]
        assert "<conversation_summary>" in str(main_bodies(fake_openai)[-1]["messages"][1])
        stored = server.get(f"/api/conversations/{session['conversationId']}")[1]
        assert len(stored["messages"]) == 12 and stored["messages"][0]["content"].startswith("message 0")
        await ws.close()
    finally:
        server.close()


async def test_review_on_an_openai_compatible_reviewer(server, fake_openai):
    # PROTOCOL 1.2 "Review" with the small model on the OpenAI-compatible API: a verdict
    # scripted to fail once, then pass.
    from tests.fakes.openai_fake import is_review, verdict

    ws, _ = await connect(server)
    fake_openai.verdicts(verdict(False, 0.3, "No title line.", ["Start with a heading"]), verdict(True, 0.85))
    fake_openai.enqueue(Reply(calls=[Call("generate_artifact", {"title": "Note", "type": "text", "content": "tides"})]),
                        Reply("Drafted."), Reply(calls=[Call("rewrite_artifact", {"content": "# Tides\n\ntides"})]),
                        Reply("Added a heading."), when=is_main)
    frames = await turn(ws, "Write a note on tides", settings={"review": {"maxRevisions": 1}})
    reviews = [f for f in frames if f["type"] == "review"]
    assert [(r["passed"], r["score"], r["revision"]) for r in reviews] == [(False, 0.3, 0), (True, 0.85, 1)]
    assert reviews[0]["suggestions"] == ["Start with a heading"] and frames[-1]["stopReason"] == "end_turn"
    asked = [b for b in fake_openai.requests if is_review(b)][-2:]
    assert all(b["model"] == SMALL and b["tool_choice"]["function"]["name"] == "submit_review" for b in asked)
    assert "No title line." in json.dumps(main_bodies(fake_openai)[-2]["messages"])
    await ws.close()

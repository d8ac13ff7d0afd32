"""A real client against the real server: turns, tools, abort, API failures."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from tests import pace
from tests.fakes.anthropic_fake import Fault, Reply, Text, Thinking, ToolUse
from tests.support import connect, recv, send, text_of, until


def assert_seqs(frames: list[dict], after: int) -> None:
    """Every logged frame carries the next seq: no gaps, no repeats."""
    seqs = [f["seq"] for f in frames if "seq" in f]
    assert seqs == list(range(after + 1, after + 1 + len(seqs))), seqs


async def test_plain_turn_streams_and_is_stored(server, fake_anthropic):
    ws, session = await connect(server)
    assert session["type"] == "session" and session["seq"] == 0 and session["running"] is False
    assert {"name": "web_search", "enabled": True} in [
        {k: v for k, v in t.items() if k != "reason"} for t in session["tools"]]
    # deltas 120 ms apart (the server merges only what comes within 50 ms)
    fake_anthropic.enqueue(Reply("Hello from the model, in pieces.", chunk_size=5, delay=0.12))
    await send(ws, type="message", content="hi")
    frames = await until(ws, "done")
    assert_seqs(frames, 0)
    kinds = [f["type"] for f in frames]
    assert kinds[-2:] == ["context_update", "done"] and set(kinds[:-2]) == {"content_chunk"}
    assert len(kinds) >= 5  # it streamed in pieces, not one blob
    assert text_of(frames) == "Hello from the model, in pieces."
    done = frames[-1]
    usage = done["usage"]
    assert done["stopReason"] == "end_turn" and usage["outputTokens"] > 0
    # the prompt is cached up to its last message: the API counts it as written to the cache
    assert usage["inputTokens"] + usage["cacheWriteTokens"] + usage["cacheReadTokens"] > 0
    assert all(f["conversationId"] == session["conversationId"] for f in frames)
    status, body = server.get(f"/api/conversations/{session['conversationId']}")
    assert status == 200
    assert [(m["role"], m["content"], m["status"]) for m in body["messages"]] == [
        ("user", "hi", "complete"), ("assistant", "Hello from the model, in pieces.", "complete")]
    await ws.close()


async def test_a_burst_is_merged_into_few_frames_that_the_log_replays_alike(server, fake_anthropic):
    """400 deltas sent at once: what the server has read of them when the turn first takes
    any goes out at once, in one frame (the first text is never held for the window), the
    rest merged per 50 ms; what was sent is what `resume` replays, under the same seqs."""
    ws, session = await connect(server)
    words = " ".join(f"w{i}" for i in range(800))
    fake_anthropic.enqueue(Reply(words, chunk_size=5))
    await send(ws, type="message", content="hi")
    frames = await until(ws, "done")
    assert_seqs(frames, 0)
    chunks = [f for f in frames if f["type"] == "content_chunk"]
    assert text_of(frames) == words and 1 <= len(chunks) <= 20, len(chunks)
    assert chunks[0]["content"].startswith(words[:5])  # the first text is never held back
    replay, _ = await connect(server, session["conversationId"])
    await send(replay, type="resume", afterSeq=0)
    assert [await recv(replay) for _ in frames] == frames  # (the title job's frame may come at any point)
    # the next turn, right away: its first token is not held back either
    fake_anthropic.enqueue(Reply(words, chunk_size=5))
    await send(ws, type="message", content="again")
    again = [f for f in await until(ws, "done") if f["type"] == "content_chunk"]
    assert again[0]["content"].startswith(words[:5]) and "".join(f["content"] for f in again) == words
    await ws.close(), await replay.close()


async def test_deltas_of_different_kinds_keep_their_order(server, fake_anthropic):
    """Thinking, then text, then a tool card: merging never moves text across another frame."""
    ws, _ = await connect(server)
    fake_anthropic.enqueue(Reply([Thinking("pondering " * 30), Text("answer " * 40),
                                  ToolUse("noop_unknown_tool", {})], chunk_size=7))
    fake_anthropic.enqueue(Reply("after the tool"))
    await send(ws, type="message", content="think", settings={"thinking": True})
    frames = await until(ws, "done")
    kinds = [f["type"] for f in frames]
    first_text, last_thinking = kinds.index("content_chunk"), len(kinds) - 1 - kinds[::-1].index("thinking_chunk")
    assert last_thinking < first_text < kinds.index("tool_start")
    thinking = "".join(f["content"] for f in frames if f["type"] == "thinking_chunk")
    assert thinking == "pondering " * 30
    await ws.close()


async def test_parallel_tools_with_progress(server, fake_anthropic, fake_exa):
    ws, session = await connect(server)
    fake_exa.delay = 2.5  # long enough that progress must be reported while it runs
    try:
        fake_anthropic.enqueue(Reply([Text("Searching both."), ToolUse("web_search", {"query": "alpha"}),
                                      ToolUse("web_search", {"query": "beta"})]))
        await send(ws, type="message", content="compare alpha and beta")
        frames = await until(ws, "done", timeout=20)
    finally:
        fake_exa.delay = 0.0
    assert_seqs(frames, session["seq"])
    starts = [f for f in frames if f["type"] == "tool_start"]
    ends = [f for f in frames if f["type"] == "tool_end"]
    assert {s["input"]["query"] for s in starts} == {"alpha", "beta"}
    assert {e["toolId"] for e in ends} == {s["toolId"] for s in starts}
    assert all(not e["isError"] and len(e["output"]["results"]) == 5 for e in ends)
    assert all({"title", "url", "publishedDate"} <= set(e["output"]["results"][0]) for e in ends)
    # both ran at once: the second started before the first ended, and each took ~2.5 s, not 5
    first_end = min(frames.index(e) for e in ends)
    assert all(frames.index(s) < first_end for s in starts)
    assert all(2.0 < e["duration"] < 4.5 for e in ends)
    for start in starts:
        times = [0.0] + [f["elapsed"] for f in frames if f["type"] == "tool_progress" and f["toolId"] == start["toolId"]]
        times.append(next(e["duration"] for e in ends if e["toolId"] == start["toolId"]))
        assert max(b - a for a, b in zip(times, times[1:])) <= 2.0, times
    # the results went back to the model in one user message, one tool_result each
    last = fake_anthropic.last_main.body["messages"][-1]
    assert last["role"] == "user" and [b["type"] for b in last["content"]] == ["tool_result", "tool_result"]
    await ws.close()


async def test_abort_mid_stream_keeps_partial_text_and_next_turn_is_valid(server, fake_anthropic):
    ws, session = await connect(server)
    fake_anthropic.enqueue(Reply("word " * 200, chunk_size=5, delay=0.02))
    await send(ws, type="message", content="write a lot")
    seen = [await recv(ws) for _ in range(5)]
    assert all(f["type"] == "content_chunk" for f in seen)
    started = time.monotonic()
    await send(ws, type="abort")
    frames = seen + await until(ws, "done")
    elapsed = time.monotonic() - started
    assert frames[-1]["stopReason"] == "aborted" and elapsed < pace.scaled(1.0)
    partial = text_of(frames)
    assert 0 < len(partial) < len("word " * 200)
    conversation = server.get(f"/api/conversations/{session['conversationId']}")[1]
    reply = conversation["messages"][-1]
    assert reply["status"] == "aborted" and reply["content"] == partial
    # the model-facing history stayed valid: the fake rejects what the real API would
    fake_anthropic.enqueue(Reply("Fine."))
    await send(ws, type="message", content="continue")
    frames = await until(ws, "done")
    assert frames[-1]["stopReason"] == "end_turn"
    sent = fake_anthropic.last_main.body["messages"]
    assert sent[-2]["role"] == "assistant" and "stopped" in json.dumps(sent[-2])
    await ws.close()


async def test_abort_mid_tool_closes_the_card_and_next_turn_is_valid(server, fake_anthropic, fake_exa):
    ws, session = await connect(server)
    fake_exa.delay = 30
    try:
        fake_anthropic.enqueue(Reply([ToolUse("web_search", {"query": "slow"})]))
        await send(ws, type="message", content="search slowly")
        await until(ws, "tool_start")
        started = time.monotonic()
        await send(ws, type="abort")
        frames = await until(ws, "done")
    finally:
        fake_exa.delay = 0.0
    assert time.monotonic() - started < pace.scaled(1.0)
    ends = [f for f in frames if f["type"] == "tool_end"]
    assert len(ends) == 1 and ends[0]["isError"] is True
    assert frames[-1]["stopReason"] == "aborted"
    fake_anthropic.enqueue(Reply("Recovered."))
    await send(ws, type="message", content="never mind")
    frames = await until(ws, "done")
    assert frames[-1]["stopReason"] == "end_turn" and text_of(frames) == "Recovered."
    sent = fake_anthropic.last_main.body["messages"]
    results = [b for m in sent for b in m["content"] if isinstance(b, dict) and b.get("type") == "tool_result"]
    assert results[-1]["is_error"] is True
    await ws.close()


async def test_abort_without_turn_is_ignored(server):
    ws, _ = await connect(server)
    await send(ws, type="abort")
    await send(ws, type="ping")
    assert (await recv(ws))["type"] == "pong"
    await ws.close()


async def test_busy_while_a_turn_runs(server, fake_anthropic):
    ws, _ = await connect(server)
    fake_anthropic.enqueue(Reply("slow " * 20, chunk_size=5, delay=0.05))
    await send(ws, type="message", content="first")
    await recv(ws)
    await send(ws, type="message", content="second")
    frames = await until(ws, "done")
    errors = [f for f in frames if f["type"] == "error"]
    assert [e["code"] for e in errors] == ["busy"]
    assert frames[-1]["stopReason"] == "end_turn"
    await ws.close()


@pytest.mark.parametrize("fault, code", [
    (Fault.status(429, retry_after=0), "rate_limited"),
    (Fault.status(400, message="messages: something the API disliked"), "llm_error"),
    (Fault.status(500), "llm_error"),
])
async def test_api_failures_become_error_and_done(server, fake_anthropic, fault, code):
    ws, _ = await connect(server)
    # the SDK retries 429/5xx once (CHAT_AGENT_LLM_MAX_RETRIES=1), never a 400
    fake_anthropic.enqueue(*([fault] if fault.status_code == 400 else [fault, fault]))
    await send(ws, type="message", content="hello")
    frames = await until(ws, "done")
    errors = [f for f in frames if f["type"] == "error"]
    assert len(errors) == 1 and errors[0]["code"] == code and "Traceback" not in errors[0]["message"]
    assert frames[-1]["stopReason"] == "error"
    fake_anthropic.enqueue(Reply("Back."))
    await send(ws, type="message", content="again")
    frames = await until(ws, "done")
    assert frames[-1]["stopReason"] == "end_turn"
    await ws.close()


async def test_midstream_overload_before_output_is_retried(server, fake_anthropic):
    ws, _ = await connect(server)
    def main_calls() -> int:
        return len(fake_anthropic.main_bodies)
    before = main_calls()
    fake_anthropic.enqueue(Fault.midstream_error(after_events=1), Reply("Second try worked."))
    await send(ws, type="message", content="hello")
    frames = await until(ws, "done")
    assert [f["type"] for f in frames if f["type"] == "error"] == []
    assert text_of(frames) == "Second try worked." and frames[-1]["stopReason"] == "end_turn"
    assert main_calls() - before == 2
    await ws.close()


async def test_midstream_error_after_output_keeps_partial(server, fake_anthropic):
    ws, session = await connect(server)
    fake_anthropic.enqueue(Fault.midstream_error(after_events=6, reply=Reply("partial answer here", chunk_size=4)))
    await send(ws, type="message", content="hello")
    frames = await until(ws, "done")
    assert [f["code"] for f in frames if f["type"] == "error"] == ["llm_error"]
    assert frames[-1]["stopReason"] == "error"
    partial = text_of(frames)
    assert partial and "partial answer here".startswith(partial)
    fake_anthropic.enqueue(Reply("ok"))
    await send(ws, type="message", content="again")
    assert (await until(ws, "done"))[-1]["stopReason"] == "end_turn"
    await ws.close()


async def test_max_steps_and_max_tokens(make_server, fake_anthropic):
    server = make_server(CHAT_AGENT_MAX_STEPS="2")
    ws, _ = await connect(server)
    loop = [Reply([ToolUse("web_search", {"query": f"q{i}"})]) for i in range(2)]
    fake_anthropic.enqueue(*loop)
    await send(ws, type="message", content="loop forever")
    frames = await until(ws, "done")
    assert frames[-1]["stopReason"] == "max_steps"
    assert len([f for f in frames if f["type"] == "tool_end"]) == 2
    fake_anthropic.enqueue(Reply("cut sho", stop_reason="max_tokens"))
    await send(ws, type="message", content="next")
    assert (await until(ws, "done"))[-1]["stopReason"] == "max_tokens"
    fake_anthropic.enqueue(Reply("I can't help with that.", stop_reason="refusal"))
    await send(ws, type="message", content="next")
    assert (await until(ws, "done"))[-1]["stopReason"] == "refusal"
    fake_anthropic.enqueue(Reply("fine"))
    await send(ws, type="message", content="and now")
    assert (await until(ws, "done"))[-1]["stopReason"] == "end_turn"
    await ws.close()


async def test_thinking_streams_and_signatures_go_back(server, fake_anthropic):
    from tests.fakes.anthropic_fake import Thinking
    ws, _ = await connect(server)
    fake_anthropic.enqueue(Reply([Thinking("Let me think about searching."), ToolUse("web_search", {"query": "x"})]),
                           Reply([Thinking("Now answer."), Text("Answer.")]))
    await send(ws, type="message", content="think", settings={"thinking": True})
    frames = await until(ws, "done")
    assert frames[-1]["stopReason"] == "end_turn"
    thinking = "".join(f["content"] for f in frames if f["type"] == "thinking_chunk")
    assert "Let me think" in thinking and "Now answer." in thinking
    second = fake_anthropic.last_main.body
    assert second["thinking"]["type"] == "enabled"
    assistant = second["messages"][-2]
    assert assistant["content"][0]["type"] == "thinking" and assistant["content"][0]["signature"]
    await ws.close()


async def test_concurrent_tool_turns(server, fake_anthropic):
    """50 conversations at once, each a tool turn; all complete with valid frames."""
    async def one(i: int) -> list[dict]:
        ws, session = await connect(server)
        await send(ws, type="message", content=f'turn {i} [[tool web_search {{"query": "q{i}"}}]]')
        frames = await until(ws, "done", timeout=60)
        await ws.close()
        assert_seqs(frames, session["seq"])
        return frames
    results = await asyncio.gather(*(one(i) for i in range(50)))
    for frames in results:
        assert frames[-1]["stopReason"] == "end_turn"
        assert [f["type"] for f in frames].count("tool_end") == 1

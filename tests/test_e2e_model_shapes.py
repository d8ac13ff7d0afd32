"""Odd replies the real API sends, through the real server and the fake API: thinking cut
by max_tokens, a tool call cut mid-JSON, a tool call with broken JSON, a refusal, a full
context window. Each turn ends as the protocol says, and the next turn is a normal one
that the fake (which refuses what the real API refuses) accepts."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.fakes.anthropic_fake import Reply, Text, Thinking, ToolUse
from tests.support import connect, send, text_of, until

@pytest.fixture(autouse=True)
def fresh_script(fake_anthropic):
    """A test that fails leaves replies queued; they must not answer the next test's calls."""
    fake_anthropic.clear()
    yield
    fake_anthropic.clear()


REFUSAL = {"type": "refusal", "category": "cyber", "explanation": "This request was refused due to policy."}


def of(kind: str, frames: list[dict]) -> list[dict]:
    return [f for f in frames if f["type"] == kind]


def texts(message: dict[str, Any]) -> list[str]:
    content = message["content"]
    if isinstance(content, str):
        return [content]
    return [b["text"] for b in content if b.get("type") == "text"]


async def turn(ws, fake, *replies: Reply, content: str, **extra: Any) -> list[dict]:
    """Sends one message with `replies` queued for it; returns its frames, `done` last, and
    checks that the fake accepted every call the turn made."""
    before = len(fake.main_bodies)
    fake.enqueue(*replies)
    await send(ws, type="message", content=content, **extra)
    frames = await until(ws, "done")
    made = fake._main()[before:]
    assert made and all(r.status == 200 for r in made), [(r.status, r.error) for r in made]
    assert not of("error", frames), of("error", frames)
    return frames


async def next_turn_is_normal(ws, fake) -> dict:
    """A plain turn after the odd one: it ends well, and returns the body the fake received."""
    frames = await turn(ws, fake, Reply("All good."), content="And now something simple.")
    assert frames[-1]["stopReason"] == "end_turn" and text_of(frames) == "All good."
    return fake.last_main.body


async def test_thinking_cut_by_max_tokens_is_not_sent_back(server, fake_anthropic):
    ws, session = await connect(server)
    thinking = {"thinking": True}
    frames = await turn(ws, fake_anthropic, Reply([Thinking("Weighing every option at great length")], cut=True),
                        content="think hard", settings=thinking)
    assert frames[-1]["stopReason"] == "max_tokens"
    shown = "".join(f["content"] for f in of("thinking_chunk", frames))
    assert shown == "Weighing every option at great length"
    # Before: the empty signature went back on every later call and the API answered 400.
    frames = await turn(ws, fake_anthropic, Reply([Thinking("Short this time."), Text("Answer.")]),
                        content="try again", settings=thinking)
    assert frames[-1]["stopReason"] == "end_turn" and text_of(frames) == "Answer."
    sent = fake_anthropic.last_main.body["messages"]
    assert all(b.get("signature") for m in sent for b in m["content"] if b.get("type") == "thinking")
    body = await next_turn_is_normal(ws, fake_anthropic)
    assert [b["type"] for b in body["messages"][1]["content"]] == ["text"]  # the cut thinking is gone
    assert [b["type"] for b in body["messages"][3]["content"]] == ["thinking", "text"]  # the signed one stays
    status, stored = server.get(f"/api/conversations/{session['conversationId']}")
    assert status == 200 and stored["messages"][1]["thinking"] == shown  # the user still sees it
    await ws.close()


async def test_a_call_cut_by_max_tokens_tells_the_client_it_was_not_applied(server, fake_anthropic):
    ws, session = await connect(server)
    cut = '{"title": "Spring", "type": "text", "content": "Roses are red,\\nviolets are blue,\\nand this po'
    frames = await turn(ws, fake_anthropic, Reply([Text("Drafting."), ToolUse("generate_artifact", raw_json=cut)],
                                                  cut=True, chunk_size=9), content="write a very long poem")
    kinds = [f["type"] for f in frames]
    assert "".join(f["content"] for f in of("artifact_chunk", frames)).startswith("Roses are red,\nviolets")
    [start], [end] = of("tool_start", frames), of("tool_end", frames)
    assert start["name"] == end["name"] == "generate_artifact" and start["toolId"] == end["toolId"]
    assert start["input"] == {} and end["isError"] is True
    assert "ran out of output tokens" in end["output"] and "discarded" in end["output"]
    assert kinds.index("artifact_chunk") < kinds.index("tool_start") < kinds.index("tool_end") < kinds.index("done")
    assert "artifact" not in kinds and frames[-1]["stopReason"] == "max_tokens"
    body = await next_turn_is_normal(ws, fake_anthropic)
    reply = body["messages"][-2]
    assert reply["role"] == "assistant" and all(b["type"] == "text" for b in reply["content"])
    assert any("generate_artifact was not run" in t for t in texts(reply))
    status, stored = server.get(f"/api/conversations/{session['conversationId']}")
    assert stored["artifact"] is None
    [card] = stored["messages"][1]["toolCalls"]
    assert card["isError"] is True and "ran out of output tokens" in card["output"]
    await ws.close()


async def test_a_call_with_invalid_json_is_a_tool_error_and_the_model_retries(server, fake_anthropic, exa):
    ws, _ = await connect(server)
    broken = '{"query": "paris weather", "unit": celsius}'
    frames = await turn(ws, fake_anthropic, Reply([Text("Checking."), ToolUse("web_search", raw_json=broken)]),
                        Reply([ToolUse("web_search", {"query": "paris weather"})]), Reply("Sunny in Paris."),
                        content="weather in paris?")
    assert frames[-1]["stopReason"] == "end_turn" and text_of(frames).endswith("Sunny in Paris.")
    first, second = of("tool_end", frames)
    assert first["isError"] is True and "not valid JSON" in first["output"] and broken in first["output"]
    assert second["isError"] is False
    assert [s["input"] for s in of("tool_start", frames)] == [{}, {"query": "paris weather"}]
    retry = fake_anthropic.main_bodies[-2]["messages"]
    [result] = retry[-1]["content"]
    assert result["type"] == "tool_result" and result["is_error"] is True and broken in result["content"]
    assert retry[-2]["content"][-1]["input"] == {}
    await next_turn_is_normal(ws, fake_anthropic)
    await ws.close()


async def test_a_refusal_says_why_and_leaves_the_model_history(server, fake_anthropic):
    ws, session = await connect(server)
    await turn(ws, fake_anthropic, Reply("Hello."), content="Hi")
    frames = await turn(ws, fake_anthropic, Reply("I can", stop_reason="refusal", stop_details=REFUSAL),
                        content="something refused")
    assert frames[-1]["stopReason"] == "refusal" and frames[-1]["detail"] == REFUSAL["explanation"]
    body = await next_turn_is_normal(ws, fake_anthropic)
    assert [texts(m) for m in body["messages"]] == [["Hi"], ["Hello."], ["And now something simple."]]
    # Without an explanation `done` has no detail; that exchange leaves too.
    frames = await turn(ws, fake_anthropic, Reply([Text("")], stop_reason="refusal"), content="refused again")
    assert frames[-1]["stopReason"] == "refusal" and "detail" not in frames[-1]
    body = await next_turn_is_normal(ws, fake_anthropic)
    assert "refused again" not in json.dumps(body["messages"]) and len(body["messages"]) == 5
    status, stored = server.get(f"/api/conversations/{session['conversationId']}")
    assert [(m["role"], m["status"]) for m in stored["messages"]][2:4] == [("user", "complete"),
                                                                           ("assistant", "refusal")]
    assert stored["messages"][3]["content"] == "I can"  # what the user saw stays visible
    _, fresh = await connect(server, session["conversationId"])
    assert [m["status"] for m in fresh["messages"]].count("refusal") == 2
    await ws.close()


async def test_a_full_context_window_stops_as_max_tokens(server, fake_anthropic):
    ws, _ = await connect(server)
    frames = await turn(ws, fake_anthropic, Reply("Out of ro", stop_reason="model_context_window_exceeded"),
                        content="go on forever")
    assert frames[-1]["stopReason"] == "max_tokens" and text_of(frames) == "Out of ro"
    # A call it cut off is closed too, and says why.
    cut = Reply([Text("Saving."), ToolUse("generate_artifact", raw_json='{"title": "Log", "type": "text", "content": "x')],
                cut=True, stop_reason="model_context_window_exceeded")
    frames = await turn(ws, fake_anthropic, cut, content="save it")
    [end] = of("tool_end", frames)
    assert end["isError"] is True and "context window" in end["output"]
    assert frames[-1]["stopReason"] == "max_tokens"
    body = await next_turn_is_normal(ws, fake_anthropic)
    assert texts(body["messages"][1]) == ["Out of ro"]
    assert texts(body["messages"][3])[0] == "Saving." and "context window" in texts(body["messages"][3])[1]
    await ws.close()

"""Context accounting and summaries as a client sees them; tools that are not configured."""

from __future__ import annotations

import asyncio

from tests.fakes.anthropic_fake import Reply
from tests.support import connect, send, until


async def test_long_history_is_summarized_between_steps(make_server, fake_anthropic):
    server = make_server(CHAT_AGENT_SUMMARY_CHARS="3000", CHAT_AGENT_SMALL_MODEL="claude-haiku-test")
    ws, session = await connect(server)
    before = len(fake_anthropic.requests)  # the fake is shared: earlier tests' summaries are in its log
    updates = []
    for i in range(6):
        await send(ws, type="message", content=f"message {i} " + "z" * 400)
        frames = await until(ws, "done")
        assert frames[-1]["stopReason"] == "end_turn"
        updates += [f for f in frames if f["type"] == "context_update"]
    summarized = [u for u in updates if u["summarized"]]
    assert summarized, "a summary happened once the history passed 3,000 characters"
    assert all(u["maxTokens"] == 200_000 and u["tokens"] > 0 for u in updates)
    summary_calls = [r for r in fake_anthropic.requests[before:]
                     if r.body.get("model") == "claude-haiku-test" and "condense" in str(r.body.get("system"))]
    assert summary_calls and "message 0" in summary_calls[0].body["messages"][0]["content"]
    last = fake_anthropic.last_main.body["messages"]
    assert "<conversation_summary>" in last[0]["content"][0]["text"]
    assert "message 5" in str(last[-1])
    # the visible history is untouched
    body = server.get(f"/api/conversations/{session['conversationId']}")[1]
    assert len(body["messages"]) == 12 and body["messages"][0]["content"].startswith("message 0")
    await ws.close()


async def test_unconfigured_tool_is_not_offered_and_session_says_why(make_server, fake_anthropic):
    server = make_server(EXA_API_KEY="")
    ws, session = await connect(server)
    web = next(t for t in session["tools"] if t["name"] == "web_search")
    assert web["enabled"] is False and "EXA_API_KEY" in web["reason"]
    fake_anthropic.enqueue(Reply("no tools today"))
    await send(ws, type="message", content="search something")
    await until(ws, "done")
    assert "web_search" not in [t["name"] for t in fake_anthropic.last_main.body["tools"]]
    await ws.close()


async def test_web_search_can_be_switched_off_per_message(server, fake_anthropic):
    ws, session = await connect(server)
    fake_anthropic.enqueue(Reply("ok"))
    await send(ws, type="message", content="hi", settings={"webSearch": False})
    await until(ws, "done")
    assert "web_search" not in [t["name"] for t in fake_anthropic.last_main.body["tools"]]
    fake_anthropic.enqueue(Reply("ok"))
    await send(ws, type="message", content="hi")
    await until(ws, "done")
    # deep_research and search_knowledge are offered only to a message that asks for them
    offered = [t["name"] for t in session["tools"] if t["enabled"] and t["name"] not in ("deep_research",
                                                                                         "search_knowledge")]
    assert offered[:5] == ["generate_artifact", "rewrite_artifact", "update_artifact", "web_search", "reflect"]
    assert [t["name"] for t in fake_anthropic.last_main.body["tools"]] == offered
    await ws.close()


async def test_missing_anthropic_key_is_a_clear_error(make_server):
    server = make_server(ANTHROPIC_API_KEY="")
    ws, _ = await connect(server)
    await send(ws, type="message", content="hi")
    frame = (await until(ws, "error"))[-1]
    assert frame["code"] == "llm_error" and "ANTHROPIC_API_KEY" in frame["message"]
    status, health = server.get("/health")
    assert health["anthropic"]["configured"] is False
    await ws.close()


async def test_token_count_survives_a_reconnect_and_a_restart(make_server, tmp_path, fake_anthropic):
    """What the API said the request cost (system prompt and tools included) is the count a
    client sees, whether the conversation stayed in memory or was loaded again."""
    import signal

    data = tmp_path / "data"
    server = make_server(data)
    ws, session = await connect(server)
    conversation_id = session["conversationId"]
    fake_anthropic.enqueue(Reply("a reply", usage={"input_tokens": 35_000}))
    await send(ws, type="message", content="count me")
    frames = await until(ws, "done")
    tokens = [f for f in frames if f["type"] == "context_update"][-1]["tokens"]
    assert tokens > 35_000
    await until(ws, "title")  # the title job is done with the conversation too
    await ws.close()  # the last listener leaves: the conversation is dropped from memory
    await asyncio.sleep(0.3)
    ws, snapshot = await connect(server, conversation_id)
    assert snapshot["context"]["tokens"] == tokens
    await ws.close()
    assert server.stop(signal.SIGTERM) in (0, -signal.SIGTERM)
    server = make_server(data)
    ws, snapshot = await connect(server, conversation_id)
    assert snapshot["context"]["tokens"] == tokens
    await send(ws, type="clear_context")
    update = (await until(ws, "context_update"))[-1]
    assert update["tokens"] == 0  # what clearing says, and what is kept
    await ws.close()
    ws, snapshot = await connect(server, conversation_id)
    assert snapshot["context"]["tokens"] == 0
    await ws.close()

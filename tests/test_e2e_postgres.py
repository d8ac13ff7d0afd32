"""The real server on PostgreSQL (CHAT_AGENT_DATABASE_URL names a schema of its own): a turn with
the fake model, what was stored, and a restart that finds it all again."""

from __future__ import annotations

import json
import signal

from chat_agent.store import PostgresStore
from tests import pg
from tests.fakes.anthropic_fake import Reply, ToolUse
from tests.support import connect, send, text_of, until


async def test_a_turn_is_stored_in_postgres_and_survives_a_restart(make_server, tmp_path, fake_anthropic, pg_url):
    data = tmp_path / "data"
    server = make_server(data, CHAT_AGENT_DATABASE_URL=pg_url)
    ws, session = await connect(server)
    cid = session["conversationId"]
    fake_anthropic.enqueue(Reply([ToolUse("web_search", {"query": "lyon"})]), Reply("Stored in PostgreSQL."))
    await send(ws, type="message", content="where is it kept?")
    frames = await until(ws, "done")
    await ws.close()
    assert text_of(frames).endswith("Stored in PostgreSQL.")
    assert not (data / "chat-agent.db").exists()  # nothing went to SQLite

    async with PostgresStore(pg_url) as store:
        owner = "local"  # the one user when auth is off
        conv = await store.get_conversation(owner, cid)
        assert conv is not None and conv.last_seq >= frames[-1]["seq"]
        stored = await store.events_after(owner, cid, 0)
        # every frame the client saw is stored, byte for byte, under its seq
        by_seq = {e.seq: e.frame for e in stored}
        assert all(json.loads(by_seq[f["seq"]]) == f for f in frames)
        turns = pg.query(pg_url, "SELECT status, stop_reason FROM turns WHERE conversation_id = $1", (cid,))
        assert turns == [("complete", "end_turn")] and await store.running_turns() == []
        visible = await store.load_history(owner, cid, "visible")
        assert [item.data.get("role") for item in visible][:1] == ["user"]
        assert len(await store.load_history(owner, cid, "model")) >= 3  # the question, the tool round, the answer

    assert server.stop(signal.SIGTERM) in (0, -signal.SIGTERM)
    server = make_server(data, CHAT_AGENT_DATABASE_URL=pg_url)
    ws, again = await connect(server, cid)
    assert again["seq"] >= frames[-1]["seq"] and again["running"] is False
    assert [m["role"] for m in again["messages"]] == ["user", "assistant"]
    assert again["messages"][1]["content"].endswith("Stored in PostgreSQL.")
    await ws.close()

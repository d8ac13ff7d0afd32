"""Hostile frames (lone surrogates, numbers past what the store holds, JSON nested 100k deep)
are refused before anything is stored, the socket stays, and the conversation goes on. A
connection whose loop fails is closed (1011), never left open and deaf."""

from __future__ import annotations

import json
import sqlite3

import pytest
import websockets

from tests.fakes.anthropic_fake import Reply
from tests.support import connect, recv, send, text_of, until

HUGE = 99999999999999999999999

# Raw JSON text: `\ud800` is valid JSON, but no UTF-8 encoder, SQLite or model API accepts it.
SURROGATES = [
    '{"type": "message", "content": "hi \\ud800 there"}',
    '{"type": "message", "content": "x", "canvas": {"quickAction": {"name": "translate", "language": "\\udc00"}}}',
    '{"type": "message", "content": "x", "attachments": [{"type": "document", "content": "ok",'
    ' "filename": "a\\udbff.txt"}]}',
    '{"type": "edit_artifact", "content": "fine", "title": "\\ud83d"}',
    '{"type": "message", "content": "fine", "\\udfff": 1}',
]
OUT_OF_RANGE = [
    f'{{"type": "resume", "afterSeq": {HUGE}}}',
    f'{{"type": "resume", "afterSeq": {2 ** 63}}}',
    f'{{"type": "select_artifact_version", "index": {HUGE}}}',
    f'{{"type": "message", "content": "x", "canvas": {{"highlight": {{"start": 0, "end": {HUGE}}}}}}}',
    '{"type": "message", "content": "x", "canvas": {"highlight": {"start": -1, "end": 2}}}',
]


async def _conversation_still_works(server, fake_anthropic, ws, session) -> None:
    """Nothing of the refused frames was stored, and a normal turn follows."""
    await send(ws, type="ping")
    assert (await recv(ws))["type"] == "pong"
    conversation_id = session["conversationId"]
    # not even the conversation: it is stored with its first message (PROTOCOL 1.2)
    assert server.get(f"/api/conversations/{conversation_id}")[0] == 404
    again, snapshot = await connect(server, conversation_id)
    assert snapshot["seq"] == session["seq"] and snapshot["messages"] == []  # no event was logged
    await again.close()
    fake_anthropic.enqueue(Reply("all good"))
    await send(ws, type="message", content="hello")
    frames = await until(ws, "done")
    assert text_of(frames) == "all good" and frames[-1]["stopReason"] == "end_turn"
    assert frames[0]["seq"] == session["seq"] + 1
    assert fake_anthropic.last_main.body["messages"][-1]["role"] == "user"
    assert len(fake_anthropic.last_main.body["messages"]) == 1


@pytest.mark.parametrize("raw", SURROGATES + OUT_OF_RANGE)
async def test_unstorable_input_is_refused_before_anything_is_kept(server, fake_anthropic, raw):
    ws, session = await connect(server)
    await ws.send(raw)
    error = await recv(ws)
    assert error["type"] == "error" and error["code"] == "invalid_frame", error
    assert "seq" not in error
    await _conversation_still_works(server, fake_anthropic, ws, session)
    await ws.close()


async def test_json_nested_100k_deep_is_bad_input_not_a_server_error(server, fake_anthropic):
    ws, session = await connect(server)
    deep = '{"type": "ping", "x": ' + "[" * 100_000 + "]" * 100_000 + "}"
    assert len(deep) < 1 << 20
    for raw in (deep, "[" * 100_000 + "]" * 100_000, '{"a":' * 100_000 + "1" + "}" * 100_000):
        await ws.send(raw)
        error = await recv(ws)
        assert error["code"] == "invalid_frame", error
    assert "Traceback" not in server.log() and "RecursionError" not in server.log()
    await _conversation_still_works(server, fake_anthropic, ws, session)
    await ws.close()


async def test_a_failing_send_loop_closes_the_socket_1011(make_server, tmp_path, fake_anthropic):
    """A resume whose read of the event log fails (its table is gone) ends in 1011 and a log
    line, not in a socket that stays open and answers nothing."""
    server = make_server(tmp_path / "data")
    ws, session = await connect(server)
    conversation_id = session["conversationId"]
    fake_anthropic.enqueue(Reply("stored"))
    await send(ws, type="message", content="first")
    before = await until(ws, "done")
    before.append(await recv(ws, skip=()))  # the title, the last write before the table goes away
    assert before[-1]["type"] == "title"
    path = tmp_path / "data" / "chat-agent.db"
    with sqlite3.connect(path, timeout=10) as db:
        db.execute("ALTER TABLE events RENAME TO events_away")
    try:
        await send(ws, type="resume", afterSeq=0)
        error = json.loads(await ws.recv())
        assert error["type"] == "error" and error["code"] == "internal" and "seq" not in error
        assert "Traceback" not in error["message"]
        with pytest.raises(websockets.ConnectionClosed):
            await ws.recv()
        assert ws.close_code == 1011
    finally:
        with sqlite3.connect(path, timeout=10) as db:
            db.execute("ALTER TABLE events_away RENAME TO events")
    assert "closing it (1011)" in server.log()
    ws, snapshot = await connect(server, conversation_id)
    await send(ws, type="resume", afterSeq=0)
    assert [await recv(ws, skip=()) for _ in before] == before
    fake_anthropic.enqueue(Reply("and on"))
    await send(ws, type="message", content="next")
    assert (await until(ws, "done"))[-1]["stopReason"] == "end_turn"
    await ws.close()


def test_http_bodies_with_unstorable_text_are_refused(server):
    assert server.request("PUT", "/api/memories", body={"styleRules": ["keep"], "content": []})[0] == 200
    for path, method, body in (("/api/memories", "PUT", {"styleRules": ["bad \ud800"], "content": []}),
                               ("/api/quick-actions", "POST", {"title": "t\udc00", "prompt": "p"})):
        status, answer = server.request(method, path, body=body)  # sent as the JSON escape `\ud800`
        assert status == 400 and "Unicode" in answer["error"]["message"], (status, answer)
    assert server.get("/api/memories")[1] == {"styleRules": ["keep"], "content": []}
    assert server.get("/api/quick-actions")[1]["quickActions"] == []

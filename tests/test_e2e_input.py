"""Bad input gets a clear error and the connection survives; HTTP routes; clear_context."""

from __future__ import annotations

import json

import pytest
import websockets

from tests.fakes.anthropic_fake import Reply
from tests.support import connect, recv, send, text_of, until


@pytest.mark.parametrize("raw, code", [
    ("not json", "invalid_frame"),
    ("[1, 2]", "invalid_frame"),
    ('{"content": "no type"}', "invalid_frame"),
    ('{"type": "dance"}', "unknown_type"),
    ('{"type": "message", "content": 42}', "invalid_frame"),
    ('{"type": "message", "content": "x", "settings": {"thinking": "yes"}}', "invalid_frame"),
    ('{"type": "resume", "afterSeq": "ten"}', "invalid_frame"),
    ('{"type": "resume", "afterSeq": -1}', "invalid_frame"),
    ('{"type": "message", "content": "   "}', "empty_message"),
    ('{"type": "message", "content": "x", "settings": {"model": "gpt-4o"}}', "invalid_frame"),
    ('{"type": "message", "content": "x", "canvas": {"quickAction": {"name": "emojis"}}}', "no_artifact"),
    ('{"type": "message", "content": "x", "canvas": {"highlight": {"start": 0, "end": 3}}}', "invalid_highlight"),
    ('{"type": "select_artifact_version", "index": 1}', "no_artifact"),
])
async def test_bad_frames_are_answered_and_the_socket_survives(server, raw, code):
    ws, session = await connect(server)
    await ws.send(raw)
    error = await recv(ws)
    assert error["type"] == "error" and error["code"] == code, error
    assert error["message"] and "Traceback" not in error["message"]
    assert error["conversationId"] == session["conversationId"]
    await send(ws, type="ping")
    assert (await recv(ws))["type"] == "pong"
    await ws.close()


async def test_malformed_frame_errors_carry_no_seq_but_refusals_do(server):
    ws, session = await connect(server)
    await ws.send("{{")
    assert "seq" not in await recv(ws)
    await send(ws, type="select_artifact_version", index=1)
    refusal = await recv(ws)
    assert refusal["code"] == "no_artifact" and refusal["seq"] == session["seq"] + 1
    await ws.close()


async def test_binary_and_oversized_frames(server):
    ws, _ = await connect(server)
    await ws.send(b"\x00\x01")
    assert (await recv(ws))["code"] == "invalid_frame"
    await send(ws, type="message", content="x" * (1 << 20 + 1))
    assert (await recv(ws))["code"] == "too_large"
    await send(ws, type="ping")
    assert (await recv(ws))["type"] == "pong"
    await ws.close()


async def test_repeated_client_message_id_is_ignored(server, fake_anthropic):
    ws, session = await connect(server)
    fake_anthropic.enqueue(Reply("once"))
    await send(ws, type="message", content="hello", id="client-1")
    assert text_of(await until(ws, "done")) == "once"
    await send(ws, type="message", content="hello", id="client-1")
    await send(ws, type="ping")
    assert (await recv(ws))["type"] == "pong"  # nothing else came first: the repeat was ignored
    body = server.get(f"/api/conversations/{session['conversationId']}")[1]
    assert [m["role"] for m in body["messages"]] == ["user", "assistant"]
    await ws.close()


async def test_clear_context(server, fake_anthropic):
    ws, session = await connect(server)
    fake_anthropic.enqueue(Reply("first answer"))
    await send(ws, type="message", content="remember 42")
    await until(ws, "done")
    await send(ws, type="clear_context")
    cleared = await recv(ws)
    update = await recv(ws)
    assert cleared["type"] == "context_cleared" and update["type"] == "context_update"
    assert update["tokens"] == 0 and update["seq"] == cleared["seq"] + 1
    body = server.get(f"/api/conversations/{session['conversationId']}")[1]
    assert body["messages"] == []
    fake_anthropic.enqueue(Reply("fresh"))
    await send(ws, type="message", content="what did I say?")
    await until(ws, "done")
    sent = fake_anthropic.last_main.body["messages"]
    assert len(sent) == 1 and "42" not in json.dumps(sent)
    await ws.close()


async def test_clear_context_aborts_a_running_turn(server, fake_anthropic):
    ws, _ = await connect(server)
    fake_anthropic.enqueue(Reply("slow " * 100, chunk_size=5, delay=0.05))
    await send(ws, type="message", content="go")
    await recv(ws)
    await send(ws, type="clear_context")
    frames = await until(ws, "context_cleared")
    assert [f["type"] for f in frames if f["type"] == "done"] == ["done"]
    assert next(f for f in frames if f["type"] == "done")["stopReason"] == "aborted"
    await ws.close()


async def test_http_routes(server, fake_anthropic):
    status, health = server.get("/health")
    assert status == 200 and health["status"] == "ok"
    assert {"name": "web_search", "enabled": True} in health["tools"]
    assert health["instance"]["jobs"] == "local"  # on SQLite, background jobs wait in the process
    status, schema = server.get("/api/protocol")
    assert status == 200
    server_types = {s["properties"]["type"]["const"] for s in schema["$defs"].values()  # one document (1.1)
                    if "type" in s.get("properties", {}) and "const" in s["properties"]["type"]}
    assert {"session", "content_chunk", "tool_start", "done", "error", "pong"} <= server_types
    ws, session = await connect(server)
    fake_anthropic.enqueue(Reply("x"))
    await send(ws, type="message", content="y")
    await until(ws, "done")
    await ws.close()
    conversation_id = session["conversationId"]
    # Newest first, page by page. A conversation changed while it is listed (its title may
    # land just after the first page's moment) is on a later window's page: follow the cursor.
    seen, cursor = [], None
    while True:
        page = server.get("/api/conversations" + (f"?cursor={cursor}" if cursor else ""))[1]
        listed = page["conversations"]
        assert [c["updatedAt"] for c in listed] == sorted((c["updatedAt"] for c in listed), reverse=True)
        seen += [c["id"] for c in listed]
        if (cursor := page["nextCursor"]) is None:
            break
    assert conversation_id in seen
    assert server.request("DELETE", f"/api/conversations/{conversation_id}")[0] == 204
    assert server.get(f"/api/conversations/{conversation_id}")[0] == 404
    assert server.request("DELETE", f"/api/conversations/{conversation_id}")[0] == 404
    with pytest.raises(Exception):
        ws, frame = await connect(server, conversation_id)
        assert frame["code"] == "not_found"
        await ws.recv()


async def test_unknown_conversation_closes_4404(server):
    ws = await websockets.connect(server.ws_url + "?conversationId=nope", compression=None)
    frame = json.loads(await ws.recv())
    assert frame["type"] == "error" and frame["code"] == "not_found"
    with pytest.raises(websockets.ConnectionClosed):
        await ws.recv()
    assert ws.close_code == 4404


async def test_bad_input_leaves_stored_data_intact(server, fake_anthropic):
    ws, session = await connect(server)
    fake_anthropic.enqueue(Reply("kept"))
    await send(ws, type="message", content="keep this")
    await until(ws, "done")
    path = f"/api/conversations/{session['conversationId']}"
    before = server.get(path)[1]["messages"]
    junk = ["", "null", '{"type": "message"}', '{"type": "message", "content": ["x"]}', "\udcff".encode(
        "utf-8", "surrogatepass").decode("latin-1"), '{"type": "edit_artifact"}', "x" * (2 << 20)]
    for raw in junk:
        await ws.send(raw)
        assert (await recv(ws))["type"] == "error"
    assert server.get(path)[1]["messages"] == before
    fake_anthropic.enqueue(Reply("still here"))
    await send(ws, type="message", content="next")
    assert text_of(await until(ws, "done")) == "still here"
    await ws.close()

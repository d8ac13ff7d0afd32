"""Turns outlive sockets; resume has no gaps; restarts and crashes lose nothing a client saw."""

from __future__ import annotations

import asyncio
import signal

import websockets

from tests import reaper
from tests.fakes.anthropic_fake import Reply, ToolUse
from tests.support import connect, recv, resumed, send, text_of, until

SLOW = Reply("chunk " * 60, chunk_size=6, delay=0.03)
# A killed server's lease has to expire before another process closes its turn: short here.
SHORT_LEASE = {"CHAT_AGENT_LEASE_SECONDS": "3"}
# Turns cut by a crash closed, as with continuation off (test_e2e_continuation.py has it on).
CLOSED = {**SHORT_LEASE, "CHAT_AGENT_CONTINUE_TURNS": "0"}


async def test_turn_survives_a_dropped_socket_and_resume_has_no_gaps(server, fake_anthropic):
    ws, session = await connect(server)
    conversation_id = session["conversationId"]
    fake_anthropic.enqueue(SLOW)
    await send(ws, type="message", content="stream please")
    seen = [await recv(ws) for _ in range(5)]
    await ws.close()  # the client goes away mid-turn
    await asyncio.sleep(0.3)
    ws, again = await connect(server, conversation_id)
    assert again["running"] is True and again["seq"] >= seen[-1]["seq"]
    await send(ws, type="resume", afterSeq=seen[-1]["seq"])
    # Live frames may overtake the replay (sent before the server read `resume`), and the replay
    # holds them again: a client keeps each seq once, in seq order, as chat_agent.client does.
    by_seq = {f["seq"]: f for f in seen}
    while not any(f["type"] == "done" for f in by_seq.values()) or len(by_seq) < max(by_seq):
        frame = await recv(ws)
        assert by_seq.setdefault(frame["seq"], frame) == frame, "a seq sent twice must be the same frame"
    frames = [by_seq[seq] for seq in sorted(by_seq)]
    assert sorted(by_seq) == list(range(1, len(frames) + 1)), "every frame, no gap"
    assert frames[-1]["type"] == "done"
    assert text_of(frames) == "chunk " * 60
    await ws.close()


async def test_session_snapshot_includes_the_running_reply(server, fake_anthropic):
    ws, session = await connect(server)
    fake_anthropic.enqueue(SLOW)
    await send(ws, type="message", content="go")
    for _ in range(5):
        await recv(ws)
    second, snapshot = await connect(server, session["conversationId"])
    reply = snapshot["messages"][-1]
    assert reply["role"] == "assistant" and reply["status"] == "streaming"
    # live frames continue exactly after the snapshot: snapshot text + later chunks = the reply
    rest = await until(second, "done")
    assert rest[0]["seq"] == snapshot["seq"] + 1
    assert reply["content"] + text_of(rest) == "chunk " * 60
    first_rest = await until(ws, "done")
    assert first_rest[-1] == rest[-1]
    await ws.close()
    await second.close()


async def test_every_connection_sees_the_same_frames(server, fake_anthropic):
    a, session = await connect(server)
    b, _ = await connect(server, session["conversationId"])
    fake_anthropic.enqueue(Reply([ToolUse("web_search", {"query": "both"})]), Reply("shared"))
    await send(a, type="message", content="hi")
    frames_a, frames_b = await asyncio.gather(until(a, "done"), until(b, "done"))
    assert frames_a == frames_b
    await a.close()
    await b.close()


async def test_restart_loses_nothing_and_seq_continues(make_server, tmp_path, fake_anthropic):
    data = tmp_path / "data"
    server = make_server(data)
    ws, session = await connect(server)
    conversation_id = session["conversationId"]
    fake_anthropic.enqueue(Reply([ToolUse("web_search", {"query": "persist"})]), Reply("kept across restarts"))
    await send(ws, type="message", content="remember this")
    before = await until(ws, "done")
    await ws.close()
    assert server.stop(signal.SIGTERM) in (0, -signal.SIGTERM)  # uvicorn re-raises the signal once shut down
    server = make_server(data)
    ws, snapshot = await connect(server, conversation_id)
    # the turn's frames, then the title the background job gave the conversation
    assert snapshot["seq"] == before[-1]["seq"] + 1 and snapshot["title"]
    assert [m["role"] for m in snapshot["messages"]] == ["user", "assistant"]
    assert snapshot["messages"][1]["content"].endswith("kept across restarts")
    assert snapshot["messages"][1]["toolCalls"][0]["name"] == "web_search"
    await send(ws, type="resume", afterSeq=0)
    replay = [await recv(ws) for _ in range(len(before))]
    assert replay == before
    fake_anthropic.enqueue(Reply("and more"))
    await send(ws, type="message", content="next")
    after = await until(ws, "done")
    assert after[0]["seq"] == snapshot["seq"] + 1
    # the model got the whole earlier exchange, tool pair included
    sent = fake_anthropic.last_main.body["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "user", "assistant", "user"]
    await ws.close()


async def test_sigterm_hands_the_running_turn_to_the_next_start(make_server, tmp_path, fake_anthropic):
    """One instance (SQLite) stopped mid-reply and started again: the reply goes on, whole."""
    data = tmp_path / "data"
    server = make_server(data)
    ws, session = await connect(server)
    # Longer than the stopping server lets a turn run on (5 s): it is handed over, not finished.
    fake_anthropic.enqueue(Reply("chunk " * 400, chunk_size=6, delay=0.03), Reply(" and the end."))
    await send(ws, type="message", content="go")
    seen = [await recv(ws) for _ in range(4)]
    assert server.stop(signal.SIGTERM) in (0, -signal.SIGTERM)
    server = make_server(data)
    ws, _ = await connect(server, session["conversationId"])
    await send(ws, type="resume", afterSeq=seen[-1]["seq"])
    frames = seen + await resumed(ws, seen[-1]["seq"], timeout=30)
    assert frames[-1]["stopReason"] == "end_turn" and text_of(frames).endswith(" and the end.")
    assert [f["type"] for f in frames].count("done") == 1
    reply = server.get(f"/api/conversations/{session['conversationId']}")[1]["messages"][-1]
    assert reply["status"] == "complete" and reply["content"] == text_of(frames)
    await ws.close()


async def test_sigterm_aborts_the_running_turn_cleanly(make_server, tmp_path, fake_anthropic):
    """With continuation off, SIGTERM ends the running turn as aborted."""
    data = tmp_path / "data"
    server = make_server(data, CHAT_AGENT_CONTINUE_TURNS="0")
    ws, session = await connect(server)
    fake_anthropic.enqueue(SLOW)
    await send(ws, type="message", content="go")
    seen = [await recv(ws) for _ in range(4)]
    assert server.stop(signal.SIGTERM) in (0, -signal.SIGTERM)  # uvicorn re-raises the signal once shut down
    server = make_server(data, CHAT_AGENT_CONTINUE_TURNS="0")
    ws, snapshot = await connect(server, session["conversationId"])
    reply = snapshot["messages"][-1]
    assert reply["status"] == "aborted" and reply["content"].startswith(text_of(seen))
    await send(ws, type="resume", afterSeq=0)
    frames = await until(ws, "done")
    assert frames[-1]["stopReason"] == "aborted" and frames[:4] == seen
    fake_anthropic.enqueue(Reply("still fine"))
    await send(ws, type="message", content="again")
    assert (await until(ws, "done"))[-1]["stopReason"] == "end_turn"
    await ws.close()


async def _after_the_dead_lease(server, conversation_id: str) -> tuple[object, dict]:
    """A socket on the restarted server once the dead process's turn is closed: its lease
    has to expire first (nothing tells a dead owner from a stalled one sooner)."""
    ws, snapshot = await connect(server, conversation_id)
    if snapshot["running"]:
        await until(ws, "done", timeout=20)
        await ws.close()
        ws, snapshot = await connect(server, conversation_id)
    return ws, snapshot


async def test_crash_mid_turn_is_marked_interrupted_on_start(make_server, tmp_path, fake_anthropic):
    data = tmp_path / "data"
    server = make_server(data, **CLOSED)
    ws, session = await connect(server)
    fake_anthropic.enqueue(SLOW)
    await send(ws, type="message", content="go")
    seen = [await recv(ws) for _ in range(6)]
    server.stop(signal.SIGKILL)
    server = make_server(data, **CLOSED)
    ws, snapshot = await _after_the_dead_lease(server, session["conversationId"])
    assert snapshot["running"] is False
    reply = snapshot["messages"][-1]
    assert reply["status"] == "interrupted" and reply["content"].startswith(text_of(seen))
    assert reply["parts"] == [{"type": "text", "text": reply["content"]}]
    await send(ws, type="resume", afterSeq=seen[-1]["seq"])
    tail = await until(ws, "done")
    assert tail[-1]["stopReason"] == "error"
    assert any(f["type"] == "error" for f in tail)
    fake_anthropic.enqueue(Reply("back after the crash"))
    await send(ws, type="message", content="again")
    assert (await until(ws, "done"))[-1]["stopReason"] == "end_turn"
    await ws.close()


async def test_crash_mid_tool_leaves_a_valid_history(make_server, tmp_path, fake_anthropic, fake_exa):
    data = tmp_path / "data"
    server = make_server(data, **CLOSED)
    ws, session = await connect(server)
    fake_exa.delay = 30
    try:
        fake_anthropic.enqueue(Reply([ToolUse("web_search", {"query": "never returns"})]))
        await send(ws, type="message", content="search")
        await until(ws, "tool_start")
        server.stop(signal.SIGKILL)
    finally:
        fake_exa.delay = 0.0
    server = make_server(data, **CLOSED)
    ws, snapshot = await _after_the_dead_lease(server, session["conversationId"])
    call = snapshot["messages"][-1]["toolCalls"][0]
    assert call["isError"] is True and call["duration"] is not None
    # Rebuilt from the event log: the card where it was, closed the same way.
    parts = snapshot["messages"][-1]["parts"]
    assert [p["type"] for p in parts] == ["tool"] and parts[0] == {"type": "tool", **call}
    fake_anthropic.enqueue(Reply("ok"))
    await send(ws, type="message", content="again")
    assert (await until(ws, "done"))[-1]["stopReason"] == "end_turn"
    await ws.close()


async def test_auth(make_server, fake_anthropic):
    server = make_server(CHAT_AGENT_API_KEYS="alice:tok-a,bob:tok-b")
    for bad in (None, "wrong"):
        ws = await websockets.connect(server.ws_url + (f"?token={bad}" if bad else ""), compression=None)
        frame = await recv(ws)
        assert frame["code"] == "unauthorized"
        try:
            await ws.recv()
        except websockets.ConnectionClosed:
            pass
        assert ws.close_code == 4401
    assert server.get("/api/conversations")[0] == 401
    assert server.get("/api/conversations", token="wrong")[0] == 401
    ws, session = await connect(server, token="tok-a")
    fake_anthropic.enqueue(Reply("for alice"))
    await send(ws, type="message", content="mine")
    await until(ws, "done")
    await ws.close()
    conversation_id = session["conversationId"]
    assert server.get(f"/api/conversations/{conversation_id}", token="tok-a")[0] == 200
    assert server.get(f"/api/conversations/{conversation_id}", token="tok-b")[0] == 404
    assert server.request("DELETE", f"/api/conversations/{conversation_id}", token="tok-b")[0] == 404
    assert server.get("/api/conversations", token="tok-b")[1]["conversations"] == []
    # Bearer header works on the socket too; bob cannot open alice's conversation
    ws = await websockets.connect(server.ws_url + f"?conversationId={conversation_id}",
                                  additional_headers={"Authorization": "Bearer tok-b"}, compression=None)
    assert (await recv(ws))["code"] == "not_found"


def test_refuses_open_listen_without_auth(tmp_path):
    import sys
    from tests.support import ROOT
    import os
    env = {**os.environ, "CHAT_AGENT_HOST": "0.0.0.0", "CHAT_AGENT_DATA_DIR": str(tmp_path)}
    env.pop("CHAT_AGENT_API_KEYS", None)
    env.pop("CHAT_AGENT_ALLOW_NO_AUTH", None)
    result = reaper.run([sys.executable, "server.py"], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 2 and "CHAT_AGENT_API_KEYS" in result.stderr

"""Turns that continue after a failure (PROTOCOL 1.2 "Turns continue after a failure"), end
to end with real server processes: an instance killed mid-stream or mid-tool, its turn going
on from the last completed step on the instance restarted (SQLite) or on another one
(PostgreSQL), as its clients see it and as it is stored; tools that are not safe to repeat
never run twice; CHAT_AGENT_CONTINUE_TURNS=0 closes the turn as before."""

from __future__ import annotations

import signal
import time
from pathlib import Path

from tests.fakes.anthropic_fake import Reply, Text, ToolUse
from tests.instances import instances, moto, s3_env, stored_conversation  # noqa: F401  (fixtures)
from tests.support import connect, polled, recv, resumed, send, text_of, until

SLOW = Reply("chunk " * 60, chunk_size=6, delay=0.03)
SHORT_LEASE = {"CHAT_AGENT_LEASE_SECONDS": "3"}
TOOLS = "tests.tool_plugins.counted:both"
INTERRUPTED = "Interrupted by a server failure; not run again."


def _stored(server, conversation_id: str) -> dict:
    return server.get(f"/api/conversations/{conversation_id}")[1]["messages"][-1]


async def _rest_of_turn(server, conversation_id: str, after_seq: int) -> list[dict]:
    """What a client that held frames up to `after_seq` gets of the turn, through `resume`."""
    ws, _ = await connect(server, conversation_id)
    await send(ws, type="resume", afterSeq=after_seq)
    frames = await resumed(ws, after_seq, timeout=40)
    await ws.close()
    return frames


async def test_a_reply_cut_mid_stream_by_a_crash_goes_on_after_a_restart(make_server, tmp_path, fake_anthropic):
    data = tmp_path / "data"
    server = make_server(data, **SHORT_LEASE)
    ws, session = await connect(server)
    cid = session["conversationId"]
    fake_anthropic.enqueue(SLOW)
    await send(ws, type="message", content="go")
    seen = [await recv(ws) for _ in range(6)]
    server.stop(signal.SIGKILL)
    fake_anthropic.enqueue(Reply(" and that is the end."))
    killed = time.monotonic()
    server = make_server(data, **SHORT_LEASE)
    rest = await _rest_of_turn(server, cid, seen[-1]["seq"])
    took = time.monotonic() - killed
    frames = seen + rest
    assert [f["type"] for f in frames].count("done") == 1 and frames[-1]["stopReason"] == "end_turn"
    assert not any(f["type"] == "error" for f in frames)
    assert len({f["messageId"] for f in frames if "messageId" in f}) == 1  # the same reply, continued
    seqs = [f["seq"] for f in frames]
    assert seqs == sorted(set(seqs))  # nothing twice, nothing out of order
    # The continuation call was told what the user had seen: it ends in that text, as a prefill.
    last = fake_anthropic.last_main.body["messages"][-1]
    assert last["role"] == "assistant" and last["content"][0]["text"].startswith(text_of(seen).rstrip())
    assert text_of(frames) == last["content"][0]["text"] + " and that is the end." or \
        text_of(frames).rstrip().endswith("and that is the end.")
    stored = _stored(server, cid)
    assert stored["content"] == text_of(frames) and stored["status"] == "complete" and stored["id"] == seen[0]["messageId"]
    print(f"death to done: {took:.1f} s")


async def test_a_message_sent_again_while_its_turn_goes_on_elsewhere_is_ignored(make_server, tmp_path,
                                                                                  fake_anthropic):
    # The restarted instance continues the turn without having seen the message's id: the
    # store has, and a client that sends it again (it never saw a `done`) is not told "busy".
    data = tmp_path / "data"
    server = make_server(data, **SHORT_LEASE)
    ws, session = await connect(server)
    cid = session["conversationId"]
    fake_anthropic.enqueue(SLOW)
    await send(ws, type="message", content="go", id="client-1")
    seen = [await recv(ws) for _ in range(3)]
    server.stop(signal.SIGKILL)
    fake_anthropic.enqueue(SLOW)
    server = make_server(data, **SHORT_LEASE)
    ws, _ = await connect(server, cid)
    await send(ws, type="resume", afterSeq=seen[-1]["seq"])
    await polled(lambda: fake_anthropic.pending == 0, 40)  # continued: its second reply streams
    await send(ws, type="message", content="go", id="client-1")
    rest = await resumed(ws, seen[-1]["seq"], timeout=40)
    await ws.close()
    assert not [f for f in rest if f["type"] == "error"], rest
    assert [f["type"] for f in rest].count("done") == 1 and rest[-1]["stopReason"] == "end_turn"
    assert len(server.get(f"/api/conversations/{cid}")[1]["messages"]) == 2  # one message, one reply


async def test_with_continuation_off_a_crash_closes_the_turn(make_server, tmp_path, fake_anthropic):
    data = tmp_path / "data"
    off = {**SHORT_LEASE, "CHAT_AGENT_CONTINUE_TURNS": "0"}
    server = make_server(data, **off)
    ws, session = await connect(server)
    fake_anthropic.enqueue(SLOW)
    await send(ws, type="message", content="go")
    seen = [await recv(ws) for _ in range(6)]
    server.stop(signal.SIGKILL)
    server = make_server(data, **off)
    rest = await _rest_of_turn(server, session["conversationId"], seen[-1]["seq"])
    assert rest[-1]["stopReason"] == "error" and any(f["type"] == "error" for f in rest)
    assert _stored(server, session["conversationId"])["status"] == "interrupted"


async def test_a_killed_owner_s_tools_are_not_run_twice_unless_safe(instances, fake_anthropic, tmp_path):
    record, hold = tmp_path / "runs.txt", tmp_path / "hold"
    hold.touch()
    env = {"CHAT_AGENT_TOOLS": TOOLS, "COUNTED_TOOLS_FILE": str(record), "COUNTED_TOOLS_HOLD": str(hold)}
    a, b = instances(2, **env)
    cid = stored_conversation(a)  # (a conversation is stored at its first message: one, imported)
    ws_a, _ = await connect(a, cid)
    ws_b, _ = await connect(b, cid)
    fake_anthropic.enqueue(Reply([Text("Doing both."), ToolUse("send_email", {"to": "ann@example.com"}),
                                  ToolUse("fetch_page", {"url": "https://example.com"})]))
    await send(ws_a, type="message", content="mail ann and read the page")
    seen = []
    while sum(f["type"] == "tool_start" for f in seen) < 2:
        seen.append(await recv(ws_b, timeout=20))
    await _ran(record, 2)
    a.stop(signal.SIGKILL)
    killed = time.monotonic()
    hold.unlink()  # from now on a run finishes at once
    fake_anthropic.enqueue(Reply("Sent and read."))
    first = await recv(ws_b, timeout=40)  # the continuation's first frame (the lease had to run out)
    after = time.monotonic() - killed
    rest = [first] + (await until(ws_b, "done", timeout=40) if first["type"] != "done" else [])
    print(f"kill -9 to the first continued frame: {after:.1f} s, to done: {time.monotonic() - killed:.1f} s")
    frames = seen + rest
    assert frames[-1]["stopReason"] == "end_turn" and [f["type"] for f in frames].count("done") == 1
    ends = {f["name"]: f for f in frames if f["type"] == "tool_end"}
    assert ends["send_email"]["isError"] is True and ends["send_email"]["output"] == INTERRUPTED
    assert ends["fetch_page"]["isError"] is False
    runs = record.read_text().split("\n")
    assert sorted(r.split()[0] for r in runs if r) == ["fetch_page", "fetch_page", "send_email"]
    # The model is told which call did not run again, and gets the other's result.
    results = {b["tool_use_id"]: b for b in fake_anthropic.last_main.body["messages"][-1]["content"]
               if b.get("type") == "tool_result"}
    assert sorted((b.get("is_error", False), b["content"]) for b in results.values()) == \
        [(False, "fetch_page done: https://example.com"), (True, INTERRUPTED)]
    stored = _stored(b, cid)
    assert stored["status"] == "complete"
    assert "".join(p["text"] for p in stored["parts"] if p["type"] == "text") == text_of(frames)
    assert [c["isError"] for c in stored["toolCalls"]] == [True, False]
    await ws_a.close()
    await ws_b.close()


async def _ran(record: Path, n: int) -> None:
    import asyncio
    for _ in range(400):
        if record.exists() and len(record.read_text().splitlines()) >= n:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"the tools did not start: {record.read_text() if record.exists() else 'nothing'}")

"""PROTOCOL 1.1 "Long conversations open fast", end to end: `session` carries the newest 50
messages and `moreBefore`, older pages come over HTTP, the conversation list pages with a
cursor; long conversations are written into the SQLite file before the server starts."""

from __future__ import annotations

import json
import signal
from pathlib import Path

from chat_agent.store import SqliteStore
from tests import reaper
from tests.fakes.anthropic_fake import Reply
from tests.seed import seed_conversation
from tests.support import connect, recv, send, until

OWNER = "local"  # the one user when auth is off


async def seed(data: Path, turns: dict[str, int], start: float = 1_700_000_000.0, tools: bool = False) -> None:
    """Conversations of short text turns (or with `tools`, replies with tool cards and
    realistic sizes), one a second apart in activity."""
    async with SqliteStore(data / "chat-agent.db") as store:
        for n, (conversation_id, count) in enumerate(turns.items()):
            await seed_conversation(store, OWNER, conversation_id, count, created_at=start + n, seed=n, tools=tools)


def page_back(server, conversation_id: str, before: str | None, limit: int = 50) -> list[dict]:
    """Every message before `before`, following moreBefore, oldest first."""
    pages: list[list[dict]] = []
    while before is not None:
        status, body = server.get(f"/api/conversations/{conversation_id}/messages?before={before}&limit={limit}")
        assert status == 200, body
        assert 0 < len(body["messages"]) <= limit
        pages.append(body["messages"])
        assert body["moreBefore"] in (None, body["messages"][0]["id"])
        before = body["moreBefore"]
    return [m for page in reversed(pages) for m in page]


async def test_session_has_the_newest_50_and_pages_reach_every_message_once(make_server, tmp_path, fake_anthropic):
    data = tmp_path / "data"
    await seed(data, {"c120": 59})  # 118 messages, and one turn through the server makes 120
    server = make_server(data)
    ws, session = await connect(server, "c120")
    assert session["moreBefore"] == session["messages"][0]["id"] and len(session["messages"]) == 50
    assert "paging" in session["features"]
    fake_anthropic.enqueue(Reply("The 60th answer."))
    await send(ws, type="message", content="The 60th question.")
    assert (await until(ws, "done"))[-1]["stopReason"] == "end_turn"
    await ws.close()

    ws, session = await connect(server, "c120")
    await ws.close()
    messages = session["messages"]
    assert len(messages) == 50 and session["moreBefore"] == messages[0]["id"]
    assert [m["content"] for m in messages[-2:]] == ["The 60th question.", "The 60th answer."]
    assert messages[0]["id"] == "msg_u000035"  # 120 - 50 = the 71st message, turn 35's question
    older = page_back(server, "c120", session["moreBefore"], limit=30)
    everything = older + messages
    ids = [m["id"] for m in everything]
    assert len(everything) == 120 and len(set(ids)) == 120
    assert ids[:4] == ["msg_u000000", "msg_a000000", "msg_u000001", "msg_a000001"]
    assert [m["role"] for m in everything] == ["user", "assistant"] * 60
    # the whole history over HTTP says the same, in the same order
    whole = server.get("/api/conversations/c120")[1]["messages"]
    assert [m["id"] for m in whole] == ids
    # without `before`: the newest page, as `session` has it
    status, body = server.get("/api/conversations/c120/messages?limit=10")
    assert status == 200 and [m["id"] for m in body["messages"]] == ids[-10:] and body["moreBefore"] == ids[-10]
    status, body = server.get(f"/api/conversations/c120/messages?before={ids[2]}")
    assert status == 200 and [m["id"] for m in body["messages"]] == ids[:2] and body["moreBefore"] is None


async def test_a_session_of_long_replies_stays_small(make_server, tmp_path):
    """Replies with tool output are ~3 KB each: `session` carries the newest that fit ~48 KB
    (fewer than 50), and the pages before them hold the rest."""
    data = tmp_path / "data"
    await seed(data, {"tools": 40}, tools=True)
    server = make_server(data)
    ws, session = await connect(server, "tools")
    await ws.close()
    messages = session["messages"]
    assert 5 < len(messages) < 50 and session["moreBefore"] == messages[0]["id"]
    assert messages[-1]["id"] == "msg_a000039" and messages[-1]["parts"][1]["type"] == "tool"
    assert len(json.dumps(session)) < 64_000
    older = page_back(server, "tools", session["moreBefore"], limit=200)
    assert [m["id"] for m in older + messages] == [f"msg_{r}{n:06d}" for n in range(40) for r in "ua"]


async def test_bad_paging_requests_are_refused(make_server, tmp_path):
    data = tmp_path / "data"
    await seed(data, {"c10": 10})
    server = make_server(data)
    for query, status, code in [("before=msg_nope", 404, "not_found"), ("limit=201", 400, "invalid_request"),
                                ("limit=0", 400, "invalid_request"), ("limit=ten", 400, "invalid_request"),
                                ("limit=-5", 400, "invalid_request")]:
        got, body = server.get(f"/api/conversations/c10/messages?{query}")
        assert (got, body["error"]["code"]) == (status, code), query
        assert body["error"]["message"]
    got, body = server.get("/api/conversations/nope/messages")
    assert (got, body["error"]["code"]) == (404, "not_found")
    assert server.get("/api/conversations/c10/messages?limit=200")[0] == 200
    for query in ("limit=201", "cursor=not-a-cursor", "cursor=W10", "limit=x"):
        got, body = server.get(f"/api/conversations?{query}")
        assert (got, body["error"]["code"]) == (400, "invalid_request"), query


async def test_the_running_reply_is_in_session_and_in_the_newest_page(make_server, tmp_path, fake_anthropic):
    data = tmp_path / "data"
    await seed(data, {"c60": 30})
    server = make_server(data)
    ws, _ = await connect(server, "c60")
    fake_anthropic.enqueue(Reply("streaming " * 40, chunk_size=10, delay=0.05))
    await send(ws, type="message", content="Tell me slowly.")
    frames = [await recv(ws)]
    while sum(1 for f in frames if f["type"] == "content_chunk") < 3:
        frames.append(await recv(ws))
    other, session = await connect(server, "c60")
    assert session["running"] is True
    messages = session["messages"]
    assert len(messages) == 50 and session["moreBefore"] == messages[0]["id"]
    assert messages[-2]["content"] == "Tell me slowly."
    reply = messages[-1]
    assert reply["status"] == "streaming" and reply["content"].startswith("streaming streaming")
    # the reply is the newest message of the first page, and `before` may name it
    status, body = server.get("/api/conversations/c60/messages?limit=3")
    assert status == 200 and body["messages"][-1]["id"] == reply["id"] and body["moreBefore"]
    status, body = server.get(f"/api/conversations/c60/messages?before={reply['id']}&limit=2")
    assert status == 200 and [m["content"] for m in body["messages"]][-1] == "Tell me slowly."
    # the second socket gets exactly what followed its snapshot: the rest of the reply
    rest = await until(other, "done")
    text = reply["content"] + "".join(f["content"] for f in rest if f["type"] == "content_chunk")
    assert text == ("streaming " * 40) and rest[-1]["stopReason"] == "end_turn"
    await until(ws, "done")
    for sock in (ws, other):
        await sock.close()
    body = server.get("/api/conversations/c60/messages?limit=2")[1]
    assert body["messages"][-1]["id"] == reply["id"] and body["messages"][-1]["status"] == "complete"


async def test_the_list_reaches_every_conversation_even_when_one_changes_mid_paging(make_server, tmp_path,
                                                                                   fake_anthropic):
    data = tmp_path / "data"
    # 130 conversations, one a second of activity apart (the newest is c129)
    await seed(data, {f"c{n:03d}": 1 for n in range(130)})
    server = make_server(data)

    def page(cursor: str | None) -> tuple[list[dict], str | None]:
        status, body = server.get("/api/conversations?limit=50" + (f"&cursor={cursor}" if cursor else ""))
        assert status == 200, body
        return body["conversations"], body["nextCursor"]

    first, cursor = page(None)
    assert [c["id"] for c in first[:2]] == ["c129", "c128"] and len(first) == 50 and cursor
    # one not listed yet (c010, on the third page) and one already listed (c120) become active
    for conversation_id in ("c010", "c120"):
        ws, _ = await connect(server, conversation_id)
        fake_anthropic.enqueue(Reply("Active again."))
        await send(ws, type="message", content="hello again")
        await until(ws, "done")
        await ws.close()
    listed = list(first)
    while cursor is not None:
        more, cursor = page(cursor)
        listed += more
    ids = [c["id"] for c in listed]
    assert set(ids) == {f"c{n:03d}" for n in range(130)}  # every one reached
    assert ids.count("c010") == 1  # changed before the listing reached it: once, with its new state
    assert ids.count("c120") == 2 and listed[ids.index("c120", 50)]["updatedAt"] > first[9]["updatedAt"]
    assert all(ids.count(i) == 1 for i in ids if i != "c120")  # the quiet ones: exactly once
    keys = [(c["updatedAt"], c["id"]) for c in listed[:129]]  # the first window: newest first, strictly
    assert keys == sorted(keys, reverse=True) and len(set(keys)) == 129
    assert [c["id"] for c in listed[129:]] == ["c120", "c010"]  # then what became active meanwhile
    # a fresh listing shows both at the top; the default page is 50
    fresh, cursor = server.get("/api/conversations")[1].values()
    assert [c["id"] for c in fresh[:2]] == ["c120", "c010"] and len(fresh) == 50 and cursor


async def test_pages_survive_a_restart(make_server, tmp_path, fake_anthropic):
    data = tmp_path / "data"
    await seed(data, {"c70": 35})
    server = make_server(data)
    ws, session = await connect(server, "c70")
    fake_anthropic.enqueue(Reply("Kept."))
    await send(ws, type="message", content="Keep this.")
    frames = await until(ws, "done")
    await ws.close()
    before = [m["id"] for m in page_back(server, "c70", session["moreBefore"])]
    tokens = [f["tokens"] for f in frames if f["type"] == "context_update"][-1]
    server.stop(signal.SIGKILL)
    server = make_server(data)
    ws, again = await connect(server, "c70")
    await ws.close()
    assert len(again["messages"]) == 50 and again["messages"][-1]["content"] == "Kept."
    after = page_back(server, "c70", again["moreBefore"])
    assert [m["id"] for m in after + again["messages"]][:len(before)] == before
    assert len(after) + len(again["messages"]) == 72
    assert again["context"]["tokens"] == tokens  # what the API last measured, not recounted
    listed = server.get("/api/conversations")[1]
    assert [c["id"] for c in listed["conversations"]] == ["c70"] and listed["nextCursor"] is None


async def test_the_client_lists_every_conversation_and_reads_older_messages(make_server, tmp_path):
    import subprocess
    import sys

    from tests.support import ROOT

    data = tmp_path / "data"
    await seed(data, {**{f"c{n:03d}": 1 for n in range(60)}, "long": 40})
    server = make_server(data)

    def client(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return reaper.run([sys.executable, "-m", "chat_agent.client", "--url", server.ws_url, *args],
                              cwd=ROOT, capture_output=True, text=True, timeout=60, input=stdin)

    listed = client("--list")
    assert listed.returncode == 0, listed.stderr
    ids = [line.split()[0] for line in listed.stdout.splitlines()]
    assert ids == ["long"] + [f"c{n:03d}" for n in reversed(range(60))]  # two pages of 50, newest first
    shown = client("--conversation", "long", stdin="/more\n/more\n/more\n/quit\n")
    assert shown.returncode == 0, shown.stderr
    out = shown.stdout
    assert "(older messages: /more)" in out and "(the beginning)" in out
    assert "Question 39:" in out and "Question 0:" in out  # the newest page, then pages before it
    assert out.index("Question 39:") < out.index("Question 0:") and "no older messages" in out

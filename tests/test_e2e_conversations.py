"""PROTOCOL 1.2 "Find, rename, move conversations", end to end: search over every branch and
titles, rename with its `title` frame, export → import → export round trips (a built-up
conversation with an artifact, and one of 500 messages in 3 branches), and a conversation of
1,000 messages in 10 branches opens with a small `session`."""

from __future__ import annotations

import json

from tests.fakes.anthropic_fake import Reply, ToolUse
from tests.support import connect, send, until
from tests.test_e2e_trees import texts, turn


def branched(messages: int, branches: int, words: str = "") -> dict:
    """An export document: a trunk, then `branches` branches from its middle, `messages` in all."""
    out: list[dict] = []
    parent = None

    def add(role: str, text: str) -> str:
        nonlocal parent
        id = f"m{len(out):05d}"
        out.append({"id": id, "role": role, "createdAt": 1_700_000_000.0 + len(out), "status": "complete",
                    "parentId": parent, "parts": [{"type": "text", "text": text}]})
        parent = id
        return id

    trunk = messages // 2
    for n in range(trunk):
        add("user" if n % 2 == 0 else "assistant", f"trunk message {n} {words}")
    fork = parent
    per = (messages - trunk) // branches
    leaf = None
    for b in range(branches):
        parent = fork
        for n in range(per):
            leaf = add("user" if n % 2 == 0 else "assistant", f"branch {b} message {n} {'x' * 200}")
    return {"format": "chat-agent.conversation", "version": 1, "title": f"{messages} in {branches}",
            "leafId": leaf, "messages": out, "artifact": None, "memories": None, "attachments": []}


async def test_search_rename_export_import(make_server, fake_anthropic, tmp_path):
    server = make_server(tmp_path / "data")
    ws, session = await connect(server)
    cid = session["conversationId"]
    await turn(ws, fake_anthropic, Reply([ToolUse("generate_artifact", {"title": "Notes", "type": "text",
                                                                         "content": "First notes."})]),
               Reply("Written."), type="message", content="take notes")
    await turn(ws, fake_anthropic, Reply("The walrus hums a quiet sonata."), type="message", content="sing")
    frames = await turn(ws, fake_anthropic, Reply("Something else entirely."), type="regenerate")
    active = next(f["messageId"] for f in frames if f["type"] == "done")

    # the phrase is on the branch that is not active any more
    status, found = server.get("/api/conversations?q=walrus%20sonata")
    assert status == 200 and [c["id"] for c in found["conversations"]] == [cid]
    match = found["conversations"][0]["match"]
    assert "walrus hums a quiet sonata" in match["snippet"] and match["messageId"] != active
    status, tree = server.get(f"/api/conversations/{cid}/tree")
    assert {m["id"]: m for m in tree["messages"]}[match["messageId"]]["preview"].startswith("The walrus")
    assert server.get("/api/conversations?q=giraffe")[1] == {"conversations": [], "nextCursor": None}
    assert server.get("/api/conversations?q=%20%20")[0] == 400

    # rename: the socket is told, and search finds the title
    status, body = server.request("PATCH", f"/api/conversations/{cid}", body={"title": "Marine  music"})
    assert status == 200 and body["title"] == "Marine  music"
    assert (await until(ws, "title"))[-1]["title"] == "Marine  music"
    hits = server.get("/api/conversations?q=marine")[1]["conversations"]
    assert [(h["id"], h["match"]["messageId"]) for h in hits] == [(cid, None)]
    assert server.request("PATCH", f"/api/conversations/{cid}", body={"title": " "})[0] == 400
    assert server.request("PATCH", "/api/conversations/nope", body={"title": "x"})[0] == 404

    # export → import → export: the same document
    status, exported = server.get(f"/api/conversations/{cid}/export")
    assert status == 200 and exported["title"] == "Marine  music" and exported["leafId"] == active
    assert len(exported["messages"]) == 5 and exported["artifact"]["versions"][0]["content"] == "First notes."
    status, created = server.request("POST", "/api/conversations/import", body=exported)
    assert status == 201 and created["id"] != cid and created["title"] == "Marine  music"
    status, again = server.get(f"/api/conversations/{created['id']}/export")
    assert again == exported
    # the imported conversation goes on like any other: the model reads its path from its text
    ws2, session2 = await connect(server, created["id"])
    assert session2["leafId"] == active and session2["artifact"]["current"]["content"] == "First notes."
    await turn(ws2, fake_anthropic, Reply("Going on."), type="message", content="and then?")
    request = texts(fake_anthropic.last_main.body)
    assert "Something else entirely." in request and "The walrus hums a quiet sonata." not in request
    assert request[-1] == "and then?"
    await ws2.close()
    await ws.close()

    bad = dict(exported, leafId="nope")
    assert server.request("POST", "/api/conversations/import", body=bad)[0] == 400
    assert server.request("POST", "/api/conversations/import", body={"format": "other"})[0] == 400


async def test_a_large_branched_conversation_round_trips_and_opens_small(make_server, tmp_path):
    server = make_server(tmp_path / "data")
    document = branched(500, 3, "round trip")
    status, created = server.request("POST", "/api/conversations/import", body=document)
    assert status == 201
    status, exported = server.get(f"/api/conversations/{created['id']}/export")
    for message in exported["messages"]:  # what the server adds to every message it sends
        for key in ("branch", "content", "thinking", "toolCalls", "attachments"):
            message.pop(key)
    assert exported == document
    status, tree = server.get(f"/api/conversations/{created['id']}/tree")
    parents = {m["parentId"] for m in tree["messages"]}
    assert len([m for m in tree["messages"] if m["id"] not in parents]) == 3  # three leaves

    status, created = server.request("POST", "/api/conversations/import", body=branched(1000, 10))
    ws, session = await connect(server, created["id"])
    await ws.close()
    size = len(json.dumps(session))
    print(f"session of 1,000 messages in 10 branches: {size} bytes")
    assert size <= 64 * 1024 and session["moreBefore"] is not None
    assert session["messages"][-1]["id"] == session["leafId"]
    status, page = server.get(f"/api/conversations/{created['id']}/messages?limit=60")
    fork = next(m for m in page["messages"] if m["branch"]["count"] == 10)
    assert fork["branch"]["index"] == 10 and fork["parentId"] == "m00499"

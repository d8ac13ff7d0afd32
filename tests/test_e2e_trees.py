"""PROTOCOL 1.2 "Conversations are trees", end to end over the WebSocket: regenerate, edit and
resend, switch_branch with the artifact of that point, the model seeing only the active path,
the tree and any path over HTTP, and all of it after a restart."""

from __future__ import annotations

import json

from tests.fakes.anthropic_fake import Reply, Text, ToolUse
from tests.instances import instances, moto, s3_env  # noqa: F401  (fixtures)
from tests.support import connect, recv, resumed, send, text_of, until


def texts(body: dict) -> list[str]:
    """Every text the model was sent in one request's messages, in order."""
    out: list[str] = []
    for message in body["messages"]:
        content = message["content"]
        for block in ([{"type": "text", "text": content}] if isinstance(content, str) else content):
            if block.get("type") == "text":
                out.append(block["text"])
            elif block.get("type") == "tool_result":
                out.append(json.dumps(block.get("content")))
    return out


async def turn(ws, fake, *replies, **frame) -> list[dict]:
    fake.enqueue(*replies)
    await send(ws, **frame)
    return await until(ws, "done")


def reply_id(frames: list[dict]) -> str:
    return next(f["messageId"] for f in frames if f["type"] == "done")


async def test_regenerate_edit_and_switch_branches(make_server, fake_anthropic, tmp_path):
    data = tmp_path / "data"
    server = make_server(data)
    ws, session = await connect(server)
    cid = session["conversationId"]
    assert "tree" in session["features"] and session["leafId"] is None

    # 1: a reply that writes the artifact (version 1)
    await turn(ws, fake_anthropic, Reply([Text("Drafting."), ToolUse(
        "generate_artifact", {"title": "Poem", "type": "text", "content": "Roses are red."})]),
        Reply("Here it is."), type="message", content="write a poem")
    frames = await turn(ws, fake_anthropic, Reply("Version one."), type="message", content="Question one")
    q1_answer = reply_id(frames)
    assert text_of(frames) == "Version one."

    # regenerate twice: three sibling replies; the third request holds none of the earlier ones
    frames = await turn(ws, fake_anthropic, Reply("Version two."), type="regenerate")
    history = next(f for f in frames if f["type"] == "history")
    assert history["messages"][-1]["content"] == "Question one" and history["leafId"] == history["messages"][-1]["id"]
    second = reply_id(frames)
    frames = await turn(ws, fake_anthropic, Reply("Version three."), type="regenerate")
    third = reply_id(frames)
    request = texts(fake_anthropic.last_main.body)
    assert request[-1] == "Question one"
    assert not any("Version one." in t or "Version two." in t for t in request)

    ws2, session = await connect(server, cid)
    await ws2.close()
    last = session["messages"][-1]
    assert last["id"] == third and last["branch"] == {"index": 3, "count": 3} and session["leafId"] == third
    assert last["parentId"] == session["messages"][-2]["id"]

    # the reply of turn 1 changed the artifact again meanwhile: switching back brings version 1 back
    frames = await turn(ws, fake_anthropic, Reply([ToolUse("rewrite_artifact", {"content": "Violets are blue."})]),
                        Reply("Rewritten."), type="message", content="rewrite it")
    status, tree = server.get(f"/api/conversations/{cid}/tree")
    assert status == 200 and tree["leafId"] == reply_id(frames)

    await send(ws, type="switch_branch", messageId=q1_answer)
    history = await until(ws, "history")
    history = history[-1]
    assert history["leafId"] == q1_answer and history["messages"][-1]["content"] == "Version one."
    artifact = await recv(ws)
    assert artifact["type"] in ("artifact", "artifact_edit")
    status, conversation = server.get(f"/api/conversations/{cid}")
    assert conversation["artifact"]["current"]["content"] == "Roses are red."
    assert conversation["artifact"]["versionCount"] == 2  # append-only: only the current index moved

    # the next message continues that branch: the model sees Version one, not the others
    frames = await turn(ws, fake_anthropic, Reply("Continued."), type="message", content="Question two")
    request = texts(fake_anthropic.last_main.body)
    assert "Version one." in request and "Version three." not in request and "rewrite it" not in request
    q2 = server.get(f"/api/conversations/{cid}/messages")[1]["messages"][-2]
    assert q2["content"] == "Question two" and q2["parentId"] == q1_answer

    # two more exchanges, then edit the second user message of four
    await turn(ws, fake_anthropic, Reply("Three."), type="message", content="Question three")
    await turn(ws, fake_anthropic, Reply("Four."), type="message", content="Question four")
    frames = await turn(ws, fake_anthropic, Reply("Edited answer."), type="message", content="Question two, edited",
                        editOf=q2["id"])
    request = texts(fake_anthropic.last_main.body)
    assert request[-1].endswith("Question two, edited")
    assert "Question two" not in request and "Three." not in request and "Question three" not in request
    assert "Version one." in request
    status, page = server.get(f"/api/conversations/{cid}/messages")
    edited = page["messages"][-2]
    assert edited["content"] == "Question two, edited" and edited["parentId"] == q1_answer
    assert edited["branch"] == {"index": 2, "count": 2}

    # the old branch stays whole, over HTTP by `leaf`
    status, tree = server.get(f"/api/conversations/{cid}/tree")
    by_id = {m["id"]: m for m in tree["messages"]}
    old_leaf = next(m["id"] for m in tree["messages"] if m["preview"] == "Four.")
    status, old = server.get(f"/api/conversations/{cid}/messages?leaf={old_leaf}")
    assert [m["content"] for m in old["messages"][-4:]] == ["Question three", "Three.", "Question four", "Four."]
    assert server.get(f"/api/conversations/{cid}/messages?leaf=nope")[0] == 404
    assert {by_id[second]["parentId"], by_id[third]["parentId"]} == {by_id[q1_answer]["parentId"]}

    # unknown ids, and busy
    await send(ws, type="switch_branch", messageId="nope")
    assert (await until(ws, "error"))[-1]["code"] == "not_found"
    await send(ws, type="regenerate", messageId=q2["id"])  # a user message is not a reply
    assert (await until(ws, "error"))[-1]["code"] == "not_found"
    await ws.close()

    # the tree survives a restart
    server.stop()
    server = make_server(data)
    ws, session = await connect(server, cid)
    assert session["leafId"] == reply_id(frames) and session["messages"][-1]["content"] == "Edited answer."
    status, again = server.get(f"/api/conversations/{cid}/tree")
    assert again == tree
    frames = await turn(ws, fake_anthropic, Reply("After restart."), type="regenerate")
    request = texts(fake_anthropic.last_main.body)
    assert request[-1].endswith("Question two, edited") and "Edited answer." not in request
    await ws.close()


async def test_regenerate_on_a_second_instance_and_a_reconnect_mid_regenerate(instances, fake_anthropic):
    """A on PostgreSQL owns the conversation; `regenerate` and `switch_branch` sent on B are
    forwarded to it (or B takes the conversation over), and a socket that reconnects in the
    middle of a regenerated reply resumes by seq without a gap."""
    a, b = instances(2)
    ws_a, session = await connect(a)
    cid = session["conversationId"]
    frames = await turn(ws_a, fake_anthropic, Reply("First reply."), type="message", content="Tell me something")
    first = reply_id(frames)

    ws_b, session_b = await connect(b, cid)
    assert session_b["leafId"] == first
    fake_anthropic.enqueue(Reply("Second reply, streamed slowly in pieces. " * 6, chunk_size=6, delay=0.02))
    await send(ws_b, type="regenerate")
    # Every frame counted (a title or a status has a seq too), in seq order once resumed.
    got = await until(ws_b, "content_chunk", timeout=30, skip=())
    await ws_b.close()  # mid-reply
    seq = max(f["seq"] for f in got if "seq" in f)
    ws_b, _ = await connect(b, cid)
    await send(ws_b, type="resume", afterSeq=seq)
    rest = await resumed(ws_b, seq, timeout=30, skip=())
    seqs = [f["seq"] for f in got + rest if "seq" in f]
    assert seqs == list(range(seqs[0], seqs[-1] + 1))  # no gap, no repeat
    assert text_of(got + rest).startswith("Second reply")
    second = reply_id(rest)
    assert texts(fake_anthropic.last_main.body)[-1] == "Tell me something"
    assert "First reply." not in texts(fake_anthropic.last_main.body)

    # the tree as both instances see it
    for server in (a, b):
        status, tree = server.get(f"/api/conversations/{cid}/tree")
        assert status == 200 and tree["leafId"] == second
        assert [m["parentId"] for m in tree["messages"] if m["role"] == "assistant"] == [tree["messages"][0]["id"]] * 2
    await send(ws_b, type="switch_branch", messageId=first)
    history = (await until(ws_b, "history", timeout=30))[-1]
    assert history["leafId"] == first and history["messages"][-1]["branch"] == {"index": 1, "count": 2}
    ws_c, session_c = await connect(a, cid)
    assert session_c["leafId"] == first and session_c["messages"][-1]["content"] == "First reply."
    for ws in (ws_a, ws_b, ws_c):
        await ws.close()


async def test_a_conversation_is_stored_at_its_first_message(make_server, fake_anthropic, tmp_path):
    server = make_server(tmp_path / "data")
    ws, session = await connect(server)  # a fresh page: nothing is stored
    idle = session["conversationId"]
    await ws.close()
    assert idle not in [c["id"] for c in server.get("/api/conversations")[1]["conversations"]]
    assert server.get(f"/api/conversations/{idle}")[0] == 404
    ws, session = await connect(server)
    cid = session["conversationId"]
    await send(ws, type="message", content="   ")  # refused: still nothing stored
    error = (await until(ws, "error"))[-1]
    assert error["code"] == "empty_message", error
    assert cid not in [c["id"] for c in server.get("/api/conversations")[1]["conversations"]]
    await turn(ws, fake_anthropic, Reply("Hello."), type="message", content="Hi")
    assert [c["id"] for c in server.get("/api/conversations")[1]["conversations"]] == [cid]
    await ws.close()


async def test_editing_the_first_message_starts_from_an_empty_path(make_server, fake_anthropic, tmp_path):
    data = tmp_path / "data"
    server = make_server(data)
    ws, session = await connect(server)
    cid = session["conversationId"]
    await turn(ws, fake_anthropic, Reply("One."), type="message", content="First question")
    await turn(ws, fake_anthropic, Reply("Two."), type="message", content="Second question")
    first = server.get(f"/api/conversations/{cid}/messages")[1]["messages"][0]
    frames = await turn(ws, fake_anthropic, Reply("Edited one."), type="message", content="First, edited",
                        editOf=first["id"])
    # The path moved before the first message: the history frame shows nothing of the old one.
    history = next(f for f in frames if f["type"] == "history")
    assert history["messages"] == [] and history["leafId"] is None
    assert texts(fake_anthropic.last_main.body) == ["First, edited"]
    await ws.close()
    for where in ("after the turn", "after a restart"):
        ws, session = await connect(server, cid)
        await ws.close()
        assert [m["content"] for m in session["messages"]] == ["First, edited", "Edited one."], where
        assert session["messages"][0]["branch"] == {"index": 2, "count": 2} and session["messages"][0]["parentId"] is None
        server.stop()
        server = make_server(data)
    # Switching back to the first branch brings the old path back whole.
    ws, _ = await connect(server, cid)
    await send(ws, type="switch_branch", messageId=first["id"])
    history = (await until(ws, "history"))[-1]
    assert [m["content"] for m in history["messages"]] == ["First question", "One.", "Second question", "Two."]
    await ws.close()

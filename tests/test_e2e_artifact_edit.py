"""PROTOCOL 1.1 "Artifact edits travel as edits", from real clients of the real server: a span edit
of a big artifact reaches every client as one small `artifact_edit`, is replayed as such, and is
stored as a small delta; a change of everything still sends `artifact`; the Python client
follows the artifact through edits, fetching a version over HTTP when it lacks an edit's base."""

from __future__ import annotations

import json
import sqlite3

from chat_agent import edits
from chat_agent.client import ChatClient
from tests.fakes.anthropic_fake import Reply, ToolUse
from tests.support import ServerProcess, connect, recv, send, until

# ~300 KB with characters outside ASCII and outside the BMP before the edit: an offset counted in
# UTF-16 units or in bytes would land somewhere else.
BIG = "".join(f"Paragraph {n} é🌱: the canvas keeps the document beside the chat.\n" for n in range(4500))
HIGHLIGHTED = "the canvas"  # replaced by a text sharing no first or last character with it
REPLACEMENT = "THE CANVAS"


def artifact_frames(frames: list[dict]) -> list[dict]:
    return [f for f in frames if f["type"] in ("artifact", "artifact_edit")]


def applied(base: str, edit: dict) -> str:
    return edits.apply(base, [(c["start"], c["end"], c["text"]) for c in edit["changes"]])


def session_artifact_id(session: dict) -> str:
    return session["artifact"]["id"]


def version(server: ServerProcess, conversation_id: str, index: int) -> dict:
    status, body = server.get(f"/api/conversations/{conversation_id}/artifact/versions/{index}")
    assert status == 200, body
    return body


def stored(server: ServerProcess, sql: str, *params: object) -> tuple:
    with sqlite3.connect(server.data_dir / "chat-agent.db") as db:
        return db.execute(sql, params).fetchone()


async def generate(ws, fake, content: str = BIG) -> list[dict]:
    fake.enqueue(Reply([ToolUse("generate_artifact", {"title": "Guide", "type": "text", "content": content})]),
                 Reply("Written."))
    await send(ws, type="message", content="write the guide")
    return await until(ws, "done", timeout=30)


async def test_a_span_edit_reaches_every_client_as_one_small_change(server, fake_anthropic):
    ws, session = await connect(server)
    conversation_id = session["conversationId"]
    assert "artifact_edit" in session["features"]
    assert artifact_frames(await generate(ws, fake_anthropic))[0]["type"] == "artifact"  # a first version is whole
    other, joined = await connect(server, conversation_id)
    assert joined["artifact"]["current"]["content"] == BIG  # `session` carries the whole current version

    start = BIG.index(HIGHLIGHTED, len(BIG) // 2)
    end = start + len(HIGHLIGHTED)
    fake_anthropic.enqueue(Reply([ToolUse("update_artifact", {"replacement": REPLACEMENT})], chunk_size=3),
                           Reply("Shouted."))
    await send(ws, type="message", content="louder", canvas={"highlight": {"start": start, "end": end}})
    frames = await until(ws, "done", timeout=30)
    seen_by_other = await until(other, "done", timeout=30)

    # while the model writes, the canvas streams only the replacement, never the artifact
    assert "".join(f["content"] for f in frames if f["type"] == "artifact_chunk") == REPLACEMENT
    [edit] = artifact_frames(frames)
    assert edit["type"] == "artifact_edit" and (edit["baseIndex"], edit["index"]) == (1, 2)
    assert edit["changes"] == [{"start": start, "end": end, "text": REPLACEMENT}]
    assert "title" not in edit and "language" not in edit and edit["artifactId"] == session_artifact_id(joined)
    v2 = version(server, conversation_id, 2)["content"]
    assert applied(BIG, edit) == v2 == BIG[:start] + REPLACEMENT + BIG[end:]
    sent = sum(len(json.dumps(f, ensure_ascii=False).encode()) for f in frames)
    assert sent < 5_000, f"{sent} bytes of frames for a 10-character edit of {len(BIG.encode())} bytes"
    assert seen_by_other == frames  # the second client gets the same frames, the same edit

    # stored small: the event is the edit as sent, the version a delta of version 1
    event = stored(server, "SELECT LENGTH(frame), frame FROM events WHERE conversation_id = ? AND seq = ?",
                   conversation_id, edit["seq"])
    assert json.loads(event[1]) == edit and event[0] < 500
    row = stored(server, "SELECT base_idx, LENGTH(content), LENGTH(changes) FROM artifact_versions"
                         " WHERE conversation_id = ? AND idx = 2", conversation_id)
    assert row[0] == 1 and row[1] == 0 and row[2] < 100

    # resume after the edit's seq - 1 replays the same `artifact_edit`
    late, snapshot = await connect(server, conversation_id)
    assert snapshot["artifact"]["current"]["content"] == v2 and snapshot["artifact"]["currentIndex"] == 2
    await send(late, type="resume", afterSeq=edit["seq"] - 1)
    replayed = await until(late, "done")
    assert replayed[0] == edit
    await late.close()

    # a rewrite that changes everything is sent whole
    fake_anthropic.enqueue(Reply([ToolUse("rewrite_artifact", {"content": "Nothing of the old guide is left."})]),
                           Reply("Rewritten."))
    await send(ws, type="message", content="start over")
    [whole] = artifact_frames(await until(ws, "done", timeout=30))
    assert whole["type"] == "artifact" and whole["artifact"]["current"]["content"] == "Nothing of the old guide is left."
    assert artifact_frames(await until(other, "done", timeout=30)) == [whole]

    # the user's own small edit, from the second client: an edit for both
    await send(other, type="edit_artifact", content="Nothing of the old guide is left, almost.")
    user_edit = await recv(other)
    assert await recv(ws) == user_edit
    assert user_edit["type"] == "artifact_edit" and (user_edit["baseIndex"], user_edit["index"]) == (3, 4)
    assert user_edit["changes"] == [{"start": 32, "end": 32, "text": ", almost"}]
    assert applied("Nothing of the old guide is left.", user_edit) == version(server, conversation_id, 4)["content"]

    # selecting a version sends the whole state
    await send(ws, type="select_artifact_version", index=2)
    selected = await recv(ws)
    assert selected["type"] == "artifact" and selected["artifact"]["current"]["content"] == v2
    await ws.close()
    await other.close()



async def test_the_python_client_follows_edits_and_fetches_a_version_it_lacks(server, fake_anthropic):
    client = ChatClient(server.ws_url, gap_timeout=0.5)
    await client.connect()
    try:
        assert client.artifact is None
        fake_anthropic.enqueue(Reply([ToolUse("generate_artifact", {"title": "Guide", "type": "text",
                                                                    "content": BIG})]), Reply("Written."))
        await client.run_turn("write the guide", timeout=30)
        assert client.artifact is not None and client.artifact.current.content == BIG

        start = BIG.index(HIGHLIGHTED)
        fake_anthropic.enqueue(Reply([ToolUse("update_artifact", {"replacement": REPLACEMENT})]), Reply("Done."))
        done = await client.run_turn("louder", canvas={"highlight": {"start": start, "end": start + 10}}, timeout=30)
        [edit] = [f for f in done.frames if f.type == "artifact_edit"]
        expected = version(server, client.conversation_id or "", 2)
        assert client.artifact.current_index == client.artifact.version_count == 2
        assert client.artifact.current.content == expected["content"] and client.artifact_fetches == 0

    finally:
        await client.close()

    # Reconnected and asked to replay from just before the edit (a connection is sent each seq
    # once, so on a new one), the client holds version 2 already from its `session`, not the
    # edit's base: it fetches version 2 over HTTP instead of applying the changes.
    again = ChatClient(server.ws_url, conversation_id=client.conversation_id, gap_timeout=0.5)
    await again.connect()
    try:
        assert again.artifact is not None and again.artifact.current_index == 2
        await again.resume(edit.seq - 1)
        while (await again.receive(timeout=10)).type != "done":
            pass
        assert again.artifact_fetches == 1
        assert again.artifact.current.content == expected["content"] and again.artifact.current_index == 2
    finally:
        await again.close()

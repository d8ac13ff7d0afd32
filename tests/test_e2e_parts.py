"""Visible messages keep their order (PROTOCOL 1.1 `parts`): live, after a reconnect, after a
restart, over HTTP, for thinking, attachments and aborted replies, and for rows stored before
parts existed."""

from __future__ import annotations

import base64
import json
import signal
import sqlite3
from pathlib import Path

from tests.fakes.anthropic_fake import Reply, Text, Thinking, ToolUse
from tests.samples import make_png
from tests.support import ServerProcess, connect, send, text_of, until

SEARCH = {"query": "cats"}


def kinds(message: dict) -> list[str]:
    return [part["type"] for part in message["parts"]]


def texts(message: dict) -> list[str]:
    return [part["text"] for part in message["parts"] if part["type"] == "text"]


def shown(frames: list[dict]) -> list[str]:
    """The reply's frames in the order the client saw them, runs of chunks as one entry."""
    order: list[str] = []
    for frame in frames:
        kind = {"content_chunk": "text", "thinking_chunk": "thinking", "tool_start": "tool"}.get(frame["type"])
        if kind and not (kind != "tool" and order and order[-1] == kind):
            order.append(kind)
    return order


async def tool_turn(server: ServerProcess, fake_anthropic) -> tuple[str, list[dict]]:
    """The reproduction: "Calling tools." + web_search + "Done: …", in two model calls."""
    ws, session = await connect(server)
    assert session["features"] == ["parts", "paging", "artifact_edit", "approval", "refusal_detail", "ag_ui", "status", "quotas",
                                   "continuation", "plan", "review", "tree", "search", "knowledge", "citations", "ai_sdk"]
    fake_anthropic.enqueue(Reply([Text("Calling tools."), ToolUse("web_search", SEARCH)]),
                           Reply("Done: two pages about cats."))
    await send(ws, type="message", content="find cats")
    frames = await until(ws, "done")
    await ws.close()
    return session["conversationId"], frames


def assert_ordered_reply(message: dict, tool_id: str) -> None:
    assert kinds(message) == ["text", "tool", "text"]
    assert texts(message) == ["Calling tools.", "Done: two pages about cats."]
    assert message["content"] == "Calling tools.\n\nDone: two pages about cats."
    tool = message["parts"][1]
    assert (tool["toolId"], tool["name"], tool["input"], tool["isError"]) == (tool_id, "web_search", SEARCH, False)
    assert tool["duration"] is not None and tool["output"]["results"]
    # What a 1.0 client reads is still there, as it was.
    assert [call["toolId"] for call in message["toolCalls"]] == [tool_id]
    assert message["toolCalls"][0]["output"] == tool["output"]
    assert message["id"] and message["role"] == "assistant" and message["status"] == "complete"


async def test_reply_keeps_text_tool_text_order_on_reconnect_restart_and_http(make_server, tmp_path,
                                                                              fake_anthropic, exa):
    data = tmp_path / "data"
    server = make_server(data)
    conversation_id, frames = await tool_turn(server, fake_anthropic)
    assert shown(frames) == ["text", "tool", "text"]
    tool_id = next(f["toolId"] for f in frames if f["type"] == "tool_start")

    ws, snapshot = await connect(server, conversation_id)
    await ws.close()
    assert_ordered_reply(snapshot["messages"][-1], tool_id)
    user = snapshot["messages"][0]
    assert kinds(user) == ["text"] and user["content"] == "find cats"
    status, body = server.get(f"/api/conversations/{conversation_id}")
    assert status == 200 and body["messages"] == snapshot["messages"]

    assert server.stop(signal.SIGTERM) in (0, -signal.SIGTERM)
    server = make_server(data)
    ws, again = await connect(server, conversation_id)
    await ws.close()
    assert again["messages"] == snapshot["messages"]
    assert server.get(f"/api/conversations/{conversation_id}")[1]["messages"] == snapshot["messages"]


async def test_text_around_a_tool_call_of_one_model_call_is_one_part_before_the_card(server, fake_anthropic, exa):
    # The tool starts once its model call is complete: the card follows all of that call's
    # text, in the reply as the client saw it live.
    ws, session = await connect(server)
    fake_anthropic.enqueue(Reply([Text("First."), ToolUse("web_search", SEARCH), Text(" Second.")]),
                           Reply("Third."))
    await send(ws, type="message", content="go")
    frames = await until(ws, "done")
    ws2, snapshot = await connect(server, session["conversationId"])
    await ws.close()
    await ws2.close()
    reply = snapshot["messages"][-1]
    assert shown(frames) == kinds(reply) == ["text", "tool", "text"]
    assert texts(reply) == ["First. Second.", "Third."]


async def test_thinking_parts_in_order(server, fake_anthropic, exa):
    ws, session = await connect(server)
    fake_anthropic.enqueue(Reply([Thinking("Search first."), Text("Looking."), ToolUse("web_search", SEARCH)]),
                           Reply([Thinking("Now answer."), Text("Answer.")]))
    await send(ws, type="message", content="think", settings={"thinking": True})
    frames = await until(ws, "done")
    ws2, snapshot = await connect(server, session["conversationId"])
    await ws.close()
    await ws2.close()
    reply = snapshot["messages"][-1]
    assert shown(frames) == kinds(reply) == ["thinking", "text", "tool", "thinking", "text"]
    assert [p["text"] for p in reply["parts"] if p["type"] == "thinking"] == ["Search first.", "Now answer."]
    assert reply["thinking"] == "Search first.\n\nNow answer." and reply["content"] == "Looking.\n\nAnswer."


async def test_attachment_parts_describe_what_was_attached(server, fake_anthropic):
    ws, session = await connect(server)
    fake_anthropic.enqueue(Reply("Seen."))
    image = base64.b64encode(make_png(64, 48)).decode()
    await send(ws, type="message", content="look at these", attachments=[
        {"type": "image", "data": image, "mediaType": "image/png"},
        {"type": "document", "content": "Minutes: we agreed.", "filename": "minutes.txt"}])
    await until(ws, "done")
    ws2, snapshot = await connect(server, session["conversationId"])
    await ws.close()
    await ws2.close()
    user = snapshot["messages"][0]
    assert kinds(user) == ["attachment", "attachment", "text"] and user["content"] == "look at these"
    picture, document = user["parts"][:2]
    assert (picture["kind"], picture["width"], picture["height"], picture["mediaType"]) == ("image", 64, 48, "image/png")
    assert picture["fileId"] and picture["url"]
    assert document == {"type": "attachment", "kind": "document", "filename": "minutes.txt", "chars": 19}
    # 1.0's `attachments` keep their shape: the kind is their `type`.
    assert user["attachments"][0]["type"] == "image" and user["attachments"][0]["fileId"] == picture["fileId"]
    assert user["attachments"][1] == {"type": "document", "filename": "minutes.txt", "chars": 19}


async def test_aborted_reply_keeps_its_parts_and_the_cut_tool_is_an_error(server, fake_anthropic, exa):
    exa.delay = 30
    ws, session = await connect(server)
    fake_anthropic.enqueue(Reply([Text("Searching now."), ToolUse("web_search", SEARCH)]))
    await send(ws, type="message", content="search slowly")
    await until(ws, "tool_start")
    await send(ws, type="abort")
    frames = await until(ws, "done")
    assert frames[-1]["stopReason"] == "aborted"
    ws2, snapshot = await connect(server, session["conversationId"])
    await ws.close()
    await ws2.close()
    reply = snapshot["messages"][-1]
    assert reply["status"] == "aborted" and kinds(reply) == ["text", "tool"]
    assert reply["content"] == "Searching now."
    tool = reply["parts"][1]
    assert tool["isError"] is True and tool["duration"] is not None
    assert reply["toolCalls"][0]["isError"] is True


async def test_rows_stored_without_parts_still_load(make_server, tmp_path, fake_anthropic, exa):
    data = tmp_path / "data"
    server = make_server(data)
    conversation_id, frames = await tool_turn(server, fake_anthropic)
    assert server.stop(signal.SIGTERM) in (0, -signal.SIGTERM)
    as_stored_by_1_0(data / "chat-agent.db", conversation_id)

    server = make_server(data)
    ws, snapshot = await connect(server, conversation_id)
    user, reply = snapshot["messages"]
    assert kinds(user) == ["attachment", "text"] and user["parts"][0]["filename"] == "old.txt"
    # 1.0 did not record the order: attachments, thinking, tools, then the text.
    assert kinds(reply) == ["thinking", "tool", "text"]
    assert reply["content"] == texts(reply)[0] == "Calling tools.Done: two pages about cats."
    assert reply["parts"][0]["text"] == "Old thoughts."
    assert reply["parts"][1]["toolId"] == reply["toolCalls"][0]["toolId"]
    assert server.get(f"/api/conversations/{conversation_id}")[1]["messages"] == snapshot["messages"]
    # The conversation goes on: its next reply has parts like any other.
    fake_anthropic.enqueue(Reply("Still here."))
    await send(ws, type="message", content="and now?")
    assert text_of(await until(ws, "done")) == "Still here."
    await ws.close()


def as_stored_by_1_0(db: Path, conversation_id: str) -> None:
    """Rewrites the visible history as version 1.0 stored it: no parts, the reply's text
    joined without a separator, thinking and attachments in their own fields."""
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT pos, data FROM history_items WHERE conversation_id = ? AND history = 'visible'",
                            (conversation_id,)).fetchall()
        for pos, raw in rows:
            message = json.loads(raw)
            message.pop("parts")
            if message["role"] == "user":
                message["attachments"] = [{"type": "document", "filename": "old.txt", "chars": 3}]
            else:
                message["content"] = message["content"].replace("\n\n", "")
                message["thinking"] = "Old thoughts."
            conn.execute("UPDATE history_items SET data = ? WHERE conversation_id = ? AND history = 'visible' "
                         "AND pos = ?", (json.dumps(message), conversation_id, pos))

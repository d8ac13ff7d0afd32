"""What the canvas page's chat controls read from the real server: `session.models` (the models
a message may pick, the server's default first) and the artifact's versions list, which says
which versions the user wrote (the page's "You edited the document" lines)."""

from __future__ import annotations

import pytest

from tests.fakes.anthropic_fake import Reply, ToolUse
from tests.support import connect, recv, send, until


@pytest.mark.asyncio
async def test_session_lists_the_allowed_models_default_first(make_server, fake_anthropic):
    server = make_server(CHAT_AGENT_ALLOWED_MODELS="claude-opus-test,claude-sonnet-4-6")
    ws, session = await connect(server)
    assert session["models"] == ["claude-sonnet-4-6", "claude-opus-test"]
    fake_anthropic.enqueue(Reply("Hi."))
    await send(ws, type="message", content="hello", settings={"model": "claude-opus-test"})
    await until(ws, "done")
    assert fake_anthropic.main_bodies[-1]["model"] == "claude-opus-test"
    await ws.close()


@pytest.mark.asyncio
async def test_the_versions_list_names_the_users_own_edits(server, fake_anthropic):
    ws, session = await connect(server)
    conversation_id = session["conversationId"]
    assert server.get(f"/api/conversations/{conversation_id}/artifact/versions")[0] == 404  # not stored yet
    fake_anthropic.enqueue(Reply([ToolUse("generate_artifact", {"title": "Notes", "type": "text", "content": "One."})]),
                           Reply("Written."))
    await send(ws, type="message", content="write notes")
    await until(ws, "done")
    status, body = server.get(f"/api/conversations/{conversation_id}/artifact/versions")
    assert status == 200 and [(v["index"], v["source"]) for v in body["versions"]] == [(1, "model")]
    await send(ws, type="edit_artifact", content="One.\n\nTwo.", title="My notes")
    while (await recv(ws))["type"] not in ("artifact", "artifact_edit"):
        pass
    status, body = server.get(f"/api/conversations/{conversation_id}/artifact/versions")
    assert [(v["index"], v["title"], v["source"]) for v in body["versions"]] == [(1, "Notes", "model"),
                                                                                (2, "My notes", "user")]
    assert body["versions"][0]["createdAt"] <= body["versions"][1]["createdAt"]
    assert "content" not in body["versions"][0]
    assert server.get("/api/conversations/nope/artifact/versions")[0] == 404
    await ws.close()

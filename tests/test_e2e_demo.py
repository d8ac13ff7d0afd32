"""The demo model through the real server, as a newcomer without a key meets it: a long reply
to stop and to follow after a reload, attached documents answered from their text (a long
one searched with analyze_document) and never written into the artifact as tokens, a plan
without web search, and a review that fails a draft and passes its revision."""

from __future__ import annotations

from typing import Any, Iterator

import httpx
import pytest

from tests.samples import long_pdf, make_pdf
from tests.support import ServerProcess, connect, recv, send, text_of, until

NO_KEYS = {"ANTHROPIC_API_KEY": "", "EXA_API_KEY": "", "CHAT_AGENT_DEMO": "1"}


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with ServerProcess(tmp_path_factory.mktemp("demo"), NO_KEYS) as server:
        yield server


def upload(server: ServerProcess, name: str, data: bytes) -> str:
    response = httpx.post(f"{server.http_url}/api/uploads", files={"file": (name, data, "application/octet-stream")},
                          timeout=30)
    assert response.status_code == 201, response.text
    return response.json()["uploadId"]


async def turn(ws: Any, content: str, timeout: float = 30, **extra: Any) -> list[dict]:
    await send(ws, type="message", content=content, **extra)
    frames = await until(ws, "done", timeout=timeout)
    assert frames[-1]["stopReason"] == "end_turn", frames[-1]
    return frames


async def artifact_of(server: ServerProcess, conversation_id: str) -> dict:
    ws, session = await connect(server, conversation_id)
    await ws.close()
    assert session["artifact"] is not None
    return session["artifact"]["current"]


async def test_a_long_reply_can_be_stopped_and_followed_after_a_reload(demo):
    ws, session = await connect(demo)
    cid = session["conversationId"]
    await send(ws, type="message", content="Write a long story about a lighthouse")
    first = [await recv(ws) for _ in range(12)]
    assert "done" not in [f["type"] for f in first]
    # A reload: the page opens the conversation again while the reply streams on.
    reload, again = await connect(demo, cid)
    assert again["running"] is True
    shown = again["messages"][-1]
    assert shown["role"] == "assistant" and shown["content"].startswith("# A long story: lighthouse")
    went_on = [await recv(reload) for _ in range(8)]
    chunks = [f for f in went_on if f["type"] == "content_chunk"]
    assert chunks and all(f["seq"] > again["seq"] for f in chunks)  # the rest, live, on the new socket
    await send(reload, type="abort")
    ended = (await until(reload, "done"))[-1]
    assert ended["stopReason"] == "aborted"
    # Stopped well before its end: the story is some 6,000 characters, streamed slowly.
    _, after = await connect(demo, cid)
    stopped = after["messages"][-1]
    assert stopped["status"] == "aborted" and "lighthouse" in stopped["content"]
    assert len(stopped["content"]) < 2_500 and "The end" not in stopped["content"]
    await ws.close()
    await reload.close()


async def test_documents_are_answered_from_their_text_and_never_leak_into_the_artifact(demo):
    pdf = upload(demo, "minutes.pdf", make_pdf([["The board met on Monday.", "The budget grew by ten percent."],
                                                ["Lunch was served at noon."]]))
    document = [{"type": "document", "uploadId": pdf}]
    ws, session = await connect(demo)
    cid = session["conversationId"]
    answered = text_of(await turn(ws, "How much did the budget grow?", attachments=document,
                                  settings={"webSearch": False}))
    assert "minutes.pdf" in answered and "The budget grew by ten percent." in answered
    assert "Rewriting" not in answered

    drafted = await turn(ws, "Write a short guide to brewing tea", settings={"webSearch": False})
    assert any(f["type"] == "artifact" for f in drafted)
    before = await artifact_of(demo, cid)
    # a document with a question, once the canvas holds a draft: an answer, the draft untouched
    frames = await turn(ws, "When did the board meet?", attachments=document, settings={"webSearch": False})
    assert "The board met on Monday." in text_of(frames)
    assert not any(f["type"] in ("artifact", "artifact_edit") for f in frames)
    # asked to put it into the draft: the document's sentences go in, never a placeholder
    frames = await turn(ws, "Add this to the draft", attachments=document, settings={"webSearch": False})
    assert any(f["type"] in ("artifact", "artifact_edit") for f in frames)
    after = await artifact_of(demo, cid)
    assert after["content"].startswith(before["content"].rstrip("\n"))
    assert "## From minutes.pdf" in after["content"] and "The board met on Monday." in after["content"]
    assert "[document" not in after["content"] and "file_" not in after["content"]
    await ws.close()


async def test_a_long_document_is_searched_with_analyze_document(demo):
    pdf = upload(demo, "annual.pdf", long_pdf(400))
    ws, _ = await connect(demo)
    frames = await turn(ws, "Where is the xylophone budget?", attachments=[{"type": "document", "uploadId": pdf}],
                        settings={"webSearch": False}, timeout=60)
    calls = [f for f in frames if f["type"] == "tool_start"]
    assert [c["name"] for c in calls] == ["analyze_document"] and calls[0]["input"]["query"] == "xylophone"
    end = next(f for f in frames if f["type"] == "tool_end")
    assert not end["isError"]
    reply = text_of(frames)
    assert "page 377" in reply and "xylophone" in reply.lower()
    await ws.close()


async def test_a_plan_and_a_review_that_fails_the_draft_and_passes_its_revision(demo):
    ws, session = await connect(demo)
    frames = await turn(ws, "Write a short guide to brewing green tea", timeout=60, settings={
        "webSearch": False, "review": {"enabled": True, "maxRevisions": 1, "decision": "auto"}})
    tools = [f["name"] for f in frames if f["type"] == "tool_start"]
    assert tools == ["update_plan", "generate_artifact", "update_plan", "rewrite_artifact"], tools
    plans = [f["input"]["steps"] for f in frames if f["type"] == "tool_start" and f["name"] == "update_plan"]
    assert [s["status"] for s in plans[0]] == ["done", "in_progress", "pending"]
    assert {s["status"] for s in plans[-1]} == {"done"}
    reviews = [f for f in frames if f["type"] == "review"]
    assert [(r["passed"], r["revision"]) for r in reviews] == [(False, 0), (True, 1)]
    assert "conclusion" in reviews[0]["feedback"] and reviews[0]["suggestions"]
    assert [r["target"]["index"] for r in reviews] == [1, 2]
    assert "review" in text_of(frames)  # the revision says what it did
    revised = await artifact_of(demo, session["conversationId"])
    assert "## Conclusion" in revised["content"]
    await ws.close()

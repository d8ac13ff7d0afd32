"""The AI SDK mapping on its own (no server): frames in, UI message stream chunks out
(aisdk_stream.py), and request bodies in, the WebSocket's commands out (aisdk_request.py). The
end-to-end check with the SDK's own client is tests/test_e2e_aisdk.py."""

from __future__ import annotations

import base64
import json

import pytest

from chat_agent.protocol import (ApprovalRequest, ArtifactEdit, ArtifactFrame, ArtifactState, ArtifactVersion,
                                 Citation, CitationFrame, ContentChunk, Done, ErrorFrame, ThinkingChunk, ToolEnd,
                                 ToolProgress, ToolStart, Usage)
from chat_agent.web.aisdk_request import ChatRequest
from chat_agent.web.aisdk_stream import UiStream

ART = ArtifactState(id="art_1", current_index=1, version_count=1,
                    current=ArtifactVersion(index=1, type="text", title="T", content="Hello world"))


def wire(chunks) -> list[dict]:
    """As the client reads them: each chunk's SSE line, parsed."""
    return [json.loads(c.sse()[len("data: "):]) for c in chunks]


def run(ui: UiStream, *frames) -> list[dict]:
    seq = 0
    out = []
    for frame in frames:
        seq += 1
        frame.seq = seq
        out += wire(ui.feed(frame))
    return out


def test_steps_text_thinking_tools_and_the_end():
    ui = UiStream("c1", None)
    chunks = run(ui, ThinkingChunk(message_id="m", content="hmm"), ContentChunk(message_id="m", content="Hi"),
                 ToolStart(message_id="m", tool_id="t1", name="web_search", input={"query": "q"}),
                 ToolEnd(tool_id="t1", name="web_search", output={"results": []}, duration=0.1),
                 ContentChunk(message_id="m", content="Done."),
                 Done(message_id="m", stop_reason="max_tokens", usage=Usage(input_tokens=3, output_tokens=4)))
    assert [c["type"] for c in chunks] == [
        "start", "start-step", "reasoning-start", "reasoning-delta", "reasoning-end", "text-start", "text-delta",
        "text-end", "tool-input-available", "tool-output-available", "finish-step", "start-step", "text-start",
        "text-delta", "text-end", "finish-step", "finish"]
    assert chunks[0] == {"type": "start", "messageId": "m", "messageMetadata": {"conversationId": "c1"}}
    assert chunks[8] == {"type": "tool-input-available", "toolCallId": "t1", "toolName": "web_search",
                         "input": {"query": "q"}, "providerExecuted": True}
    finish = chunks[-1]
    assert finish["finishReason"] == "length" and finish["messageMetadata"]["stopReason"] == "max_tokens"
    assert finish["messageMetadata"]["seq"] == 6 and finish["messageMetadata"]["usage"]["outputTokens"] == 4
    assert ui.finished and not ui.waiting


def test_errors_aborts_and_refusals():
    ui = UiStream("c1", None)
    chunks = run(ui, ErrorFrame(code="llm_error", message="The model failed."), Done(message_id="m", stop_reason="error"))
    assert [c["type"] for c in chunks] == ["start", "error", "finish"]
    assert chunks[1]["errorText"] == "The model failed." and chunks[2]["finishReason"] == "error"
    ui = UiStream("c1", None)
    chunks = run(ui, ContentChunk(message_id="m", content="Hi"), Done(message_id="m", stop_reason="aborted"))
    assert [c["type"] for c in chunks][-4:] == ["text-end", "finish-step", "abort", "finish"]
    assert wire(UiStream("c1", None).refused("A turn is already running.")) == [
        {"type": "error", "errorText": "A turn is already running."}]


def test_approvals_pause_the_stream_and_their_answers_show():
    ui = UiStream("c1", None)
    start = [ToolStart(message_id="m", tool_id=t, name="web_search", input={}) for t in ("t1", "t2")]
    chunks = run(ui, *start, ApprovalRequest(message_id="m", tool_id="t1", name="web_search", input={}))
    assert not ui.waiting  # t2 has not asked yet: more comes
    chunks = run(ui, ApprovalRequest(message_id="m", tool_id="t2", name="web_search", input={}))
    assert chunks == [{"type": "tool-approval-request", "approvalId": "t2", "toolCallId": "t2"}] and ui.waiting
    assert [c["type"] for c in wire(ui.pause())] == ["finish-step", "finish"]
    chunks = run(ui, ToolProgress(tool_id="t1", elapsed=1, status="Approved; running"),
                 ToolEnd(tool_id="t1", name="web_search", output="boom", duration=1, is_error=True),
                 ToolEnd(tool_id="t2", name="web_search", output="Not run: declined.", duration=1, is_error=True))
    assert [c["type"] for c in chunks] == ["tool-approval-response", "data-tool-progress", "tool-output-error",
                                           "tool-output-denied"]
    assert chunks[0]["approved"] is True and chunks[1]["transient"] is True and chunks[2]["errorText"] == "boom"
    # A request that carries the client's answer does not pause before the turn took it.
    ui = UiStream("c1", None, reply_id="m", open_tools={"t1"}, answered={"t1"})
    assert not ui.waiting and wire(ui.start())[0]["messageId"] == "m"
    assert wire(ui.feed(ToolEnd(tool_id="t1", name="web_search", output="Not run.", duration=0, is_error=True))) == [
        {"type": "tool-output-denied", "toolCallId": "t1"}]


def test_the_canvas_and_citations():
    ui = UiStream("c1", ART)
    edit = ArtifactEdit(artifact_id="art_1", base_index=1, index=2, changes=[{"start": 0, "end": 5, "text": "Bye"}])
    citation = Citation(index=1, document_id="doc_1", filename="notes.md", quote="world")
    chunks = run(ui, ContentChunk(message_id="m", content="Said "), CitationFrame(message_id="m", citation=citation),
                 edit, Done(message_id="m", stop_reason="end_turn"))
    artifact = next(c for c in chunks if c["type"] == "data-artifact")
    assert artifact["id"] == "art_1" and artifact["data"]["current"]["content"] == "Bye world"
    end = next(c for c in chunks if c["type"] == "text-end")
    assert end["citations"] == [{"source": {"type": "source", "sourceType": "document", "id": "doc_1",
                                            "mediaType": "text/markdown", "title": "notes.md", "filename": "notes.md"},
                                 "endIndex": 5, "citedText": "world"}]
    # An edit on a version the stream does not hold: it says so, and takes the store's state.
    ui = UiStream("c1", None)
    assert run(ui, ContentChunk(message_id="m", content="x"), edit)[-1]["type"] == "text-delta" and ui.stale_artifact
    assert wire(ui.artifact_now(ART))[0]["data"]["current"]["content"] == "Hello world" and not ui.stale_artifact
    # A part of the message before the reply's id is known waits for its `start`.
    ui = UiStream("c1", None)
    assert run(ui, ArtifactFrame(artifact=ART)) == []
    assert [c["type"] for c in run(ui, ContentChunk(message_id="m", content="x"))][:3] == [
        "start", "data-artifact", "start-step"]


def body(*messages, **extra) -> ChatRequest:
    return ChatRequest.model_validate({"id": "chat-1", "messages": list(messages), **extra})


def test_requests_become_commands():
    png = base64.b64encode(b"\x89PNG").decode()
    message = body({"id": "u", "role": "user", "metadata": "the app's own", "parts": [
        {"type": "text", "text": "Look"}, {"type": "file", "mediaType": "image/png", "url": f"data:image/png;base64,{png}"},
        {"type": "file", "mediaType": "application/pdf", "url": "http://127.0.0.1:8000/api/uploads/up_1"},
        {"type": "file", "mediaType": "text/plain", "url": "data:text/plain,caf%C3%A9", "filename": "a.txt"},
        {"type": "data-x", "data": 1}]}, settings={"thinking": True}).message()
    assert message.content == "Look" and message.settings.thinking
    assert [a.model_dump(by_alias=True, exclude_none=True) for a in message.attachments] == [
        {"type": "image", "data": png, "mediaType": "image/png"}, {"type": "document", "uploadId": "up_1"},
        {"type": "document", "content": "café", "filename": "a.txt"}]
    reply = {"id": "m", "role": "assistant", "metadata": {"seq": 7}, "parts": [
        {"type": "step-start"}, {"type": "reasoning", "text": "…"},
        {"type": "tool-web_search", "toolCallId": "t1", "state": "approval-responded", "input": {},
         "approval": {"id": "t1", "approved": False, "reason": "no"}},
        {"type": "tool-web_search", "toolCallId": "t2", "state": "output-available", "input": {}, "output": 1}]}
    answers = body({"id": "u", "role": "user", "parts": []}, reply)
    assert [a.model_dump() for a in answers.approvals()] == [
        {"type": "approve", "toolId": "t1", "approved": False, "message": "no"}]
    assert answers.last.seq() == 7
    with pytest.raises(ValueError, match="uploaded first"):
        body({"id": "u", "role": "user", "parts": [
            {"type": "file", "mediaType": "application/zip", "url": "data:application/zip;base64,AA=="}]}).message()
    with pytest.raises(ValueError, match="last message"):
        answers.message()

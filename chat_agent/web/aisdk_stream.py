"""One reply seen from our frames, as the AI SDK's UI message stream (aisdk_chunks.py): a pure
translation of the conversation's frames (the ones every WebSocket client gets), so `useChat`
drives the same turns as the WebSocket with no second agent loop.

- the reply is one UI message whose id is the reply's `messageId` (`start`), a step per model
  call (`start-step`/`finish-step`);
- text: `text-start/delta/end` (citations on `text-end`); thinking: `reasoning-start/delta/end`;
- a tool call: `tool-input-available` (`providerExecuted`: the server runs it), then
  `tool-output-available`, `tool-output-error`, or `tool-output-denied` for a call the user
  declined; an approval request is `tool-approval-request` (`approvalId` = the call's id) and
  its answer `tool-approval-response`;
- the canvas: `data-artifact` (one part per artifact id, the WebSocket's ArtifactState, replaced
  on every change); transient `data-*` parts (`onData` only) for what is no part of the
  message: `title`, `context`, `status`, `tool-progress`, `artifact-delta` (the artifact as the
  model writes it); `data-review` parts for reviews;
- `done`: `finish` (`finishReason`; `messageMetadata`: conversation id, stop reason, usage and
  the last `seq`); an aborted turn adds `abort`, a failed one an `error` chunk first.

A reply that waits for the user's approval (every open call of it waits) is `waiting`: its
stream ends there with `finish` (`tool-calls`), and the turn goes on once the answers come
with the next request.
"""

from __future__ import annotations

import json
import mimetypes
from typing import Any

from chat_agent import edits
from chat_agent.protocol import (ApprovalRequest, ArtifactChunk, ArtifactEdit, ArtifactFrame, ArtifactState,
                                 CitationFrame, ContentChunk, ContextUpdate, Done, ErrorFrame, ReviewDecided,
                                 ReviewFrame, ReviewRequest, ServerFrame, StatusFrame, ThinkingChunk, TitleFrame,
                                 ToolEnd, ToolProgress, ToolStart)
from chat_agent.web.aisdk_chunks import (Abort, AnyChunk, Data, ErrorChunk, Finish, FinishReason, FinishStep,
                                         ReasoningDelta, ReasoningEnd, ReasoningStart, SourceDocument,
                                         SourceDocumentChunk, Start, StartStep, TextCitation, TextDelta, TextEnd,
                                         TextStart, ToolApprovalRequest, ToolApprovalResponse, ToolInputAvailable,
                                         ToolOutputAvailable, ToolOutputDenied, ToolOutputError)

FINISH_REASONS: dict[str, FinishReason] = {"end_turn": "stop", "max_tokens": "length", "refusal": "content-filter",
                                           "max_steps": "other", "aborted": "other", "error": "error"}


class UiStream:
    """Feeds on frames in seq order, hands back the chunks each one makes."""

    def __init__(self, conversation_id: str, artifact: ArtifactState | None, *, reply_id: str | None = None,
                 open_tools: set[str] | None = None, answered: set[str] | None = None):
        self.conversation_id = conversation_id
        self.artifact = artifact
        self.reply_id = reply_id  # known up front when a request continues a reply the client has
        self.seq = 0  # the last frame's
        self.finished = False
        self.stale_artifact = False  # an edit came that the state held cannot take (see `artifact_now`)
        self._started = False
        self._held: list[AnyChunk] = []  # message parts made before the reply's id was known
        # A reply continued after approvals is inside the step of the calls that waited.
        self._step = open_tools is not None
        self._answered = False  # results came in the current step: what comes next is a new step
        self._text: str | None = None
        self._citations: list[TextCitation] = []
        self._text_chars = 0
        self._reasoning: str | None = None
        self._parts = 0
        self._open: set[str] = set(open_tools or ())  # calls started, not ended
        self._asked: set[str] = set(answered or ())  # calls whose approval was asked, no outcome seen
        # Calls the client answered with this request: not waiting for the user any more, even
        # before the frames say so (the answer may still be on its way to the turn).
        self._told: set[str] = set(answered or ())
        self._error: ErrorFrame | None = None

    @property
    def waiting(self) -> bool:
        """Every open call of the reply waits for the user: nothing more comes until they answer."""
        unanswered = self._asked - self._told
        return not self.finished and bool(unanswered) and self._open <= unanswered

    def start(self) -> list[AnyChunk]:
        """`start` now, for a reply whose id is known (or none: a stream that only refuses)."""
        if self._started:
            return []
        self._started = True
        held, self._held = self._held, []
        return [Start(message_id=self.reply_id, message_metadata={"conversationId": self.conversation_id}), *held]

    def refused(self, message: str) -> list[AnyChunk]:
        """The request was refused before its turn began (busy, a bad highlight...)."""
        self.finished = True
        return [ErrorChunk(error_text=message)]

    def pause(self) -> list[AnyChunk]:
        """The stream ends here while the reply waits for approvals: the turn goes on."""
        return [*self._close(), *self._end_step(), Finish(finish_reason="tool-calls", message_metadata=self._meta())]

    def feed(self, frame: ServerFrame) -> list[AnyChunk]:
        if frame.seq is not None:
            self.seq = max(self.seq, frame.seq)
        match frame:
            case ContentChunk(message_id=message_id, content=text):
                return self._say(message_id, text)
            case ThinkingChunk(message_id=message_id, content=text):
                return self._think(message_id, text)
            case ToolStart(message_id=message_id, tool_id=tool_id, name=name, input=tool_input):
                self._open.add(tool_id)
                return self._part(message_id, [ToolInputAvailable(tool_call_id=tool_id, tool_name=name,
                                                                  input=tool_input)])
            case ApprovalRequest(tool_id=tool_id):
                self._asked.add(tool_id)
                return self._message([ToolApprovalRequest(approval_id=tool_id, tool_call_id=tool_id)])
            case ToolProgress(tool_id=tool_id, elapsed=elapsed, status=status):
                chunks: list[AnyChunk] = []
                if tool_id in self._asked:  # it runs: the user approved it
                    self._asked.discard(tool_id)
                    chunks = self._message([ToolApprovalResponse(approval_id=tool_id, approved=True)])
                return [*chunks, _note("tool-progress", {"toolCallId": tool_id, "elapsed": elapsed, "status": status})]
            case ToolEnd():
                return self._message(self._tool_end(frame))
            case ArtifactFrame(artifact=artifact):
                self.artifact = artifact
                return self._message([self._artifact_part()])
            case ArtifactEdit():
                return self._edit(frame)
            case ArtifactChunk(tool_id=tool_id, content=content):
                return [_note("artifact-delta", {"toolCallId": tool_id, "content": content})]
            case CitationFrame(citation=citation):
                return self._cite(citation)
            case TitleFrame(title=title):
                return [_note("title", {"title": title})]
            case ContextUpdate(tokens=tokens, max_tokens=max_tokens, summarized=summarized):
                return [_note("context", {"tokens": tokens, "maxTokens": max_tokens, "summarized": summarized})]
            case StatusFrame():
                return [_note("status", frame.model_dump(mode="json", exclude={"type", "seq", "conversation_id"}))]
            case ReviewFrame(review_id=review_id):
                return self._message([Data(type="data-review", id=review_id, data=_fields(frame))])
            case ReviewRequest() | ReviewDecided():
                return [_note(frame.type.replace("_", "-"), _fields(frame))]
            case ErrorFrame():
                self._error = frame
                return []
            case Done():
                return self._done(frame)
        return []  # history, context_cleared, session...: nothing of the reply

    def artifact_now(self, artifact: ArtifactState | None) -> list[AnyChunk]:
        """The artifact as the store has it, after an edit the state held could not take."""
        self.stale_artifact = False
        self.artifact = artifact
        return self._message([self._artifact_part()]) if artifact is not None else []

    # ---- pieces ---------------------------------------------------------------------------

    def _message(self, chunks: list[AnyChunk]) -> list[AnyChunk]:
        """Parts of the reply's message: after its `start`, held until the reply's id is known."""
        if not self._started:
            self._held += chunks
            return []
        return chunks

    def _begin(self, reply_id: str) -> list[AnyChunk]:
        if self.reply_id is None:
            self.reply_id = reply_id
        chunks = self.start()
        if self._answered:  # a model call after the results of the last one
            chunks += [*self._close(), *self._end_step()]
            self._answered = False
        if not self._step:
            self._step = True
            chunks.append(StartStep())
        return chunks

    def _part(self, reply_id: str, part: list[AnyChunk]) -> list[AnyChunk]:
        chunks = self._begin(reply_id)
        return [*chunks, *self._close(), *part]

    def _say(self, reply_id: str, text: str) -> list[AnyChunk]:
        if not text:
            return []
        chunks = self._begin(reply_id)
        if self._text is None:
            chunks += self._close()
            self._text = self._new_id("text")
            chunks.append(TextStart(id=self._text))
        self._text_chars += len(text)
        return [*chunks, TextDelta(id=self._text, delta=text)]

    def _think(self, reply_id: str, text: str) -> list[AnyChunk]:
        if not text:
            return []
        chunks = self._begin(reply_id)
        if self._reasoning is None:
            chunks += self._close()
            self._reasoning = self._new_id("reasoning")
            chunks.append(ReasoningStart(id=self._reasoning))
        return [*chunks, ReasoningDelta(id=self._reasoning, delta=text)]

    def _new_id(self, kind: str) -> str:
        self._parts += 1
        return f"{self.reply_id}.{kind}.{self._parts}"

    def _close(self) -> list[AnyChunk]:
        """Ends the open text or reasoning part: something else comes next."""
        chunks: list[AnyChunk] = []
        if self._text is not None:
            chunks.append(TextEnd(id=self._text, citations=self._citations or None))
            self._text, self._citations, self._text_chars = None, [], 0
        if self._reasoning is not None:
            chunks.append(ReasoningEnd(id=self._reasoning))
            self._reasoning = None
        return chunks

    def _end_step(self) -> list[AnyChunk]:
        if not self._step:
            return []
        self._step = self._answered = False
        return [FinishStep()]

    def _tool_end(self, end: ToolEnd) -> list[AnyChunk]:
        self._answered = True
        self._open.discard(end.tool_id)
        if end.tool_id in self._asked:  # ended without running: declined, or timed out
            self._asked.discard(end.tool_id)
            return [ToolOutputDenied(tool_call_id=end.tool_id)]
        if end.is_error:
            return [ToolOutputError(tool_call_id=end.tool_id, error_text=error_text(end.output))]
        return [ToolOutputAvailable(tool_call_id=end.tool_id, output=end.output)]

    def _artifact_part(self) -> Data:
        assert self.artifact is not None
        return Data(type="data-artifact", id=self.artifact.id, data=self.artifact.model_dump(mode="json"))

    def _edit(self, edit: ArtifactEdit) -> list[AnyChunk]:
        if self.artifact is None or not edit.applies_to(self.artifact):
            self.stale_artifact = True  # not the version it was made on: the caller reads it
            return []
        try:
            self.artifact = edit.apply(self.artifact)
        except edits.EditError:
            self.stale_artifact = True
            return []
        return self._message([self._artifact_part()])

    def _cite(self, citation: Any) -> list[AnyChunk]:
        media_type = mimetypes.guess_type(citation.filename)[0] or "application/octet-stream"
        if self._text is not None:  # it belongs to the text streamed so far
            source = SourceDocument(id=citation.document_id, media_type=media_type, title=citation.filename,
                                    filename=citation.filename)
            self._citations.append(TextCitation(source=source, end_index=self._text_chars, cited_text=citation.quote))
            return []
        return self._message([SourceDocumentChunk(source_id=citation.document_id, media_type=media_type,
                                                  title=citation.filename, filename=citation.filename)])

    def _meta(self, done: Done | None = None) -> dict[str, Any]:
        meta: dict[str, Any] = {"conversationId": self.conversation_id, "seq": self.seq}
        if done is not None:
            meta.update(stopReason=done.stop_reason, usage=done.usage.model_dump(mode="json"))
            if done.detail:
                meta["detail"] = done.detail
        return meta

    def _done(self, done: Done) -> list[AnyChunk]:
        self.finished = True
        if self.reply_id is None:
            self.reply_id = done.message_id
        chunks = [*self.start(), *self._close(), *self._end_step()]
        if done.stop_reason == "error":
            error = self._error
            chunks.append(ErrorChunk(error_text=error.message if error is not None else "The turn failed."))
        elif done.stop_reason == "aborted":
            chunks.append(Abort(reason="The turn was stopped."))
        return [*chunks, Finish(finish_reason=FINISH_REASONS[done.stop_reason], message_metadata=self._meta(done))]


def error_text(output: Any) -> str:
    """A failed call's output as the `errorText` of its tool part."""
    text = output if isinstance(output, str) else json.dumps(output, ensure_ascii=False) if output else ""
    return text or "The tool failed."


def _note(name: str, data: dict[str, Any]) -> Data:
    """A transient data part: the client's `onData` sees it; the message keeps nothing of it."""
    return Data(type=f"data-{name}", data=data, transient=True)


def _fields(frame: ServerFrame) -> dict[str, Any]:
    return frame.model_dump(mode="json", exclude={"type", "seq", "conversation_id"})

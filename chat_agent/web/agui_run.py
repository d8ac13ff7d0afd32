"""One AG-UI run seen from our frames: a pure translation of the conversation's frames (the
same ones every WebSocket client gets) into AG-UI events (docs.ag-ui.com), so AG-UI clients
(CopilotKit, pydantic-ai's, LangGraph's) drive the same turns as the WebSocket with no
second agent loop.

- text: `TEXT_MESSAGE_START/CONTENT/END`; an assistant message per model call, its tool
  calls' parent (the first carries the reply's id, the next ones `id.2`, `id.3`...);
- thinking: `REASONING_START`, `REASONING_MESSAGE_START/CONTENT/END`, `REASONING_END`;
- a tool call: `TOOL_CALL_START`, its whole input as one `TOOL_CALL_ARGS`, `TOOL_CALL_END`
  once it starts; `TOOL_CALL_RESULT` when it ends (`metadata`: `isError`, `duration`);
- the canvas as the run's state, `{conversationId, title, artifact}` (artifact: the
  WebSocket's ArtifactState): `STATE_SNAPSHOT` first, `STATE_DELTA` (JSON Patch) on change;
- `CUSTOM` for what AG-UI has no event of its own for: `title`, `context`
  (`context_update`), `context_cleared`, `artifact_chunk` (the artifact as the model writes
  it), `tool_progress`, `approval_request` and the review frames (interrupts too: below),
  `status` (a silent model, a retried call);
- `done` ends the run: `RUN_FINISHED` (`result`: stop reason, usage, message id;
  `outcome: cancelled` when aborted) or `RUN_ERROR` for a turn that failed;
- a turn that waits for the client ends the run (`pause`) while the turn goes on waiting:
  approvals and review decisions as AG-UI interrupts (`RUN_FINISHED` `outcome: interrupt`,
  answered by the next run's `resume`: agui_answers.py), the client's own tools as their
  calls (the next run's messages carry the results).
"""

from __future__ import annotations

import json
from typing import Any

import jsonpatch
from ag_ui.core import (BaseEvent, CustomEvent, Interrupt, ReasoningEndEvent, ReasoningMessageContentEvent,
                        ReasoningMessageEndEvent, ReasoningMessageStartEvent, ReasoningStartEvent, RunErrorEvent,
                        RunFinishedCancelledOutcome, RunFinishedEvent, RunFinishedInterruptOutcome, RunStartedEvent,
                        StateDeltaEvent, StateSnapshotEvent, TextMessageContentEvent, TextMessageEndEvent,
                        TextMessageStartEvent, TokenUsage, ToolCallArgsEvent, ToolCallEndEvent, ToolCallResultEvent,
                        ToolCallStartEvent)

from chat_agent import edits
from chat_agent.agent.client_calls import WAITING as CLIENT_WAITING
from chat_agent.protocol import (ApprovalInfo, ApprovalRequest, ArtifactChunk, ArtifactEdit, ArtifactFrame,
                                 ArtifactState, CitationFrame, ContentChunk, ContextCleared, ContextUpdate, Done,
                                 ErrorFrame, ReviewDecided, ReviewFrame, ReviewInfo, ReviewRequest, ServerFrame,
                                 StatusFrame, ThinkingChunk, TitleFrame, ToolEnd, ToolProgress, ToolStart)


APPROVAL = "approval:"  # interrupt ids: what the interrupt asks, then the approval's tool id
REVIEW = "review:"  # or the review's id
# What a `resume` entry's payload may be (Interrupt.responseSchema).
APPROVAL_ANSWER = {"type": "object", "properties": {"approved": {"type": "boolean"}, "message": {"type": "string"}},
                   "required": ["approved"]}
REVIEW_ANSWER = {"type": "object", "properties": {"decision": {"enum": ["revise", "accept"]},
                                                  "message": {"type": "string"}}, "required": ["decision"]}


def approval_interrupt(info: ApprovalInfo | ApprovalRequest) -> Interrupt:
    return Interrupt(id=APPROVAL + info.tool_id, reason="tool_approval", tool_call_id=info.tool_id,
                     message=f"Run {info.name}?", response_schema=APPROVAL_ANSWER,
                     metadata={"messageId": info.message_id, "name": info.name, "input": info.input})


def review_interrupt(info: ReviewInfo | ReviewRequest, feedback: str | None = None) -> Interrupt:
    message = "The review did not pass" + (f": {feedback}" if feedback else ".") + " Revise, or accept as it is?"
    return Interrupt(id=REVIEW + info.review_id, reason="review_decision", message=message,
                     response_schema=REVIEW_ANSWER, metadata={"messageId": info.message_id})


class AgUiRun:
    """Feeds on frames in seq order, hands back the AG-UI events each one makes."""

    def __init__(self, thread_id: str, run_id: str, title: str | None, artifact: ArtifactState | None,
                 conversation_id: str | None = None, waiting: list[Interrupt] | None = None,
                 open_calls: dict[str, bool] | None = None, known: set[str] | None = None,
                 answered: set[str] | None = None):
        self.thread_id = thread_id
        self.run_id = run_id
        self.state: dict[str, Any] = {"conversationId": conversation_id or thread_id, "title": title,
                                      "artifact": _dump(artifact)}
        self.finished = False
        self._text: str | None = None  # the open text message's id
        self._reasoning: str | None = None  # the open reasoning message's id
        # The assistant message text and tool calls go into: AG-UI has one per model call
        # (its text, then its calls), the results after them, then the next one.
        self._message: str | None = None
        self._messages = 0  # assistant messages of this reply so far
        self._answered = False  # results came after the current message's calls
        self._error: ErrorFrame | None = None  # the turn's last error, told with RUN_ERROR
        # What the turn waits for from the client: open interrupts by id, and the open calls
        # with whether each is a client's call waiting for its result.
        self.interrupts: dict[str, Interrupt] = {i.id: i for i in waiting or []}
        self._calls: dict[str, bool] = dict(open_calls or {})
        self._feedback: dict[str, str] = {}  # review id -> the failed review's feedback
        self._known = known or set()  # the client's assistant messages: a run that goes on adds new ones
        self._answered_calls = answered or set()  # calls whose results the client sent: it has them

    def start(self, run_input: Any) -> list[BaseEvent]:
        return [RunStartedEvent(thread_id=self.thread_id, run_id=self.run_id, input=run_input),
                StateSnapshotEvent(snapshot=self.state)]

    def refused(self, code: str, message: str) -> list[BaseEvent]:
        """The message was refused before its turn began (busy, a bad highlight...)."""
        self.finished = True
        return [*self._close(), RunErrorEvent(message=message, code=code)]

    def feed(self, frame: ServerFrame) -> list[BaseEvent]:
        match frame:
            case ContentChunk(message_id=message_id, content=text):
                return self._say(message_id, text)
            case ThinkingChunk(message_id=message_id, content=text):
                return self._think(message_id, text)
            case ToolStart(message_id=message_id, tool_id=tool_id, name=name, input=tool_input):
                self._calls[tool_id] = False
                events = self._close()
                parent = self._assistant(message_id)
                return [*events, ToolCallStartEvent(tool_call_id=tool_id, tool_call_name=name,
                                                    parent_message_id=parent),
                        ToolCallArgsEvent(tool_call_id=tool_id, delta=json.dumps(tool_input, ensure_ascii=False)),
                        ToolCallEndEvent(tool_call_id=tool_id)]
            case ToolEnd(tool_id=tool_id, output=output, is_error=is_error, duration=duration):
                self._answered = True
                self._calls.pop(tool_id, None)
                self.interrupts.pop(APPROVAL + tool_id, None)
                if tool_id in self._answered_calls:
                    return []  # the client's own result: it has it as its tool message
                content = output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)
                return [ToolCallResultEvent(message_id=f"{tool_id}.result", tool_call_id=tool_id,
                                            content=content or "(no output)", role="tool",
                                            metadata={"isError": is_error, "duration": duration})]
            case ArtifactFrame(artifact=artifact):
                return self._set({**self.state, "artifact": _dump(artifact)})
            case ArtifactEdit():
                return self._set({**self.state, "artifact": self._edited(frame)})
            case TitleFrame(title=title):
                return [*self._set({**self.state, "title": title}), *self._custom("title", {"title": title})]
            case ContextUpdate(tokens=tokens, max_tokens=max_tokens, summarized=summarized):
                return self._custom("context", {"tokens": tokens, "maxTokens": max_tokens, "summarized": summarized})
            case ToolProgress(tool_id=tool_id, status=status):
                self.interrupts.pop(APPROVAL + tool_id, None)  # approved: it runs
                if tool_id in self._calls and status == CLIENT_WAITING:
                    self._calls[tool_id] = True
                return self._custom(frame.type, _value(frame))
            case ApprovalRequest():
                self.interrupts[APPROVAL + frame.tool_id] = approval_interrupt(frame)
                return self._custom(frame.type, _value(frame))
            case ReviewFrame(review_id=review_id, feedback=feedback):
                self._feedback[review_id] = feedback
                return self._custom(frame.type, _value(frame))
            case ReviewRequest(review_id=review_id):
                self.interrupts[REVIEW + review_id] = review_interrupt(frame, self._feedback.get(review_id))
                return self._custom(frame.type, _value(frame))
            case ReviewDecided(review_id=review_id):
                self.interrupts.pop(REVIEW + review_id, None)
                return self._custom(frame.type, _value(frame))
            case ArtifactChunk() | ContextCleared() | StatusFrame() | CitationFrame():
                return self._custom(frame.type, _value(frame))
            case ErrorFrame():
                self._error = frame
                return []
            case Done():
                return self._done(frame)
        return []

    def answered(self, interrupt_id: str) -> None:
        """An interrupt this run's `resume` answered: no longer waited for."""
        self.interrupts.pop(interrupt_id, None)

    def pause(self) -> list[BaseEvent]:
        """Ends the run when the turn waits for the client (nothing else of it can come before
        the client answers): once no call runs (each one waits for an approval or for the
        client's result), with the open interrupts if any. Empty while the turn goes on."""
        running = [tool_id for tool_id, waits in self._calls.items() if not waits and APPROVAL + tool_id
                   not in self.interrupts]
        if self.finished or running or not (self.interrupts or self._calls):
            return []
        self.finished = True
        outcome = RunFinishedInterruptOutcome(interrupts=list(self.interrupts.values())) if self.interrupts else None
        waiting = [tool_id for tool_id, client in self._calls.items() if client]
        return [*self._close(), RunFinishedEvent(thread_id=self.thread_id, run_id=self.run_id, outcome=outcome,
                                                 result={"stopReason": "waiting", "toolCallIds": waiting})]

    # ---- pieces ---------------------------------------------------------------------------

    def _say(self, message_id: str, text: str) -> list[BaseEvent]:
        if not text:
            return []
        events: list[BaseEvent] = []
        if self._text is None:
            events += self._close()
            self._text = self._assistant(message_id)
            events.append(TextMessageStartEvent(message_id=self._text, role="assistant"))
        events.append(TextMessageContentEvent(message_id=self._text, delta=text))
        return events

    def _think(self, message_id: str, text: str) -> list[BaseEvent]:
        if not text:
            return []
        events: list[BaseEvent] = []
        if self._reasoning is None:
            events += self._close()
            self._reasoning = f"{message_id}.thinking.{self._messages}"
            events += [ReasoningStartEvent(message_id=self._reasoning),
                       ReasoningMessageStartEvent(message_id=self._reasoning, role="reasoning")]
        events.append(ReasoningMessageContentEvent(message_id=self._reasoning, delta=text))
        return events

    def _assistant(self, reply_id: str) -> str:
        """The id of the assistant message text or a call goes into: a new one after results
        (the reply's id for the first, `id.2`, `id.3`... after it)."""
        if self._message is None or self._answered:
            self._messages += 1
            while (self._messages == 1 and reply_id in self._known) or f"{reply_id}.{self._messages}" in self._known:
                self._messages += 1
            self._message = reply_id if self._messages == 1 else f"{reply_id}.{self._messages}"
            self._answered = False
        return self._message

    def _close(self) -> list[BaseEvent]:
        """Ends the open text or reasoning message: something else comes next."""
        events: list[BaseEvent] = []
        if self._text is not None:
            events.append(TextMessageEndEvent(message_id=self._text))
            self._text = None
        if self._reasoning is not None:
            events += [ReasoningMessageEndEvent(message_id=self._reasoning),
                       ReasoningEndEvent(message_id=self._reasoning)]
            self._reasoning = None
        return events

    def _set(self, state: dict[str, Any]) -> list[BaseEvent]:
        patch = jsonpatch.make_patch(self.state, state).patch
        self.state = state
        return [StateDeltaEvent(delta=patch)] if patch else []

    def _edited(self, edit: ArtifactEdit) -> dict[str, Any] | None:
        """The artifact after an edit, from the state it was made on (the run started from
        the current version and follows every change, so the base is the one held)."""
        artifact = self.state["artifact"]
        current = artifact and artifact["current"]
        if current is None or artifact["id"] != edit.artifact_id or current["index"] != edit.base_index:
            return artifact  # not the version it was made on: left as it was (cannot happen in a run)
        content = edits.apply(current["content"], [(c.start, c.end, c.text) for c in edit.changes])
        changed = {"index": edit.index, "content": content}
        changed.update({k: v for k, v in (("title", edit.title), ("language", edit.language)) if v is not None})
        return {**artifact, "currentIndex": edit.index, "versionCount": edit.index, "current": {**current, **changed}}

    def _custom(self, name: str, value: Any) -> list[BaseEvent]:
        return [CustomEvent(name=name, value=value)]

    def _done(self, done: Done) -> list[BaseEvent]:
        self.finished = True
        events = self._close()
        if done.stop_reason == "error":
            error = self._error
            message = error.message if error is not None else "The turn failed."
            return [*events, RunErrorEvent(message=message, code=error.code if error is not None else "internal")]
        usage = done.usage
        result: dict[str, Any] = {"stopReason": done.stop_reason, "messageId": done.message_id,
                                  "usage": usage.model_dump(mode="json")}
        if done.detail:
            result["detail"] = done.detail
        # AG-UI counts every prompt token in inputTokens, cached ones as a part of it.
        tokens = TokenUsage(input_tokens=usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens,
                            output_tokens=usage.output_tokens, cached_input_tokens=usage.cache_read_tokens,
                            cache_write_input_tokens=usage.cache_write_tokens)
        outcome = RunFinishedCancelledOutcome() if done.stop_reason == "aborted" else None
        return [*events, RunFinishedEvent(thread_id=self.thread_id, run_id=self.run_id, result=result,
                                          outcome=outcome, usage=[tokens])]


def _value(frame: ServerFrame) -> dict[str, Any]:
    return frame.model_dump(mode="json", exclude={"type", "seq", "conversation_id"})


def _dump(artifact: ArtifactState | None) -> dict[str, Any] | None:
    return artifact.model_dump(mode="json") if artifact is not None else None

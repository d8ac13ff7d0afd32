"""What an AG-UI run carries besides a new message: the client's answers to a turn that waits
for it, and its own edit of the canvas.

- `resume` answers the interrupts the last run ended with (agui_run.py): an approval
  (`approval:{toolId}`, payload `{approved, message?}` or a bare boolean; `cancelled`
  declines) or a review decision (`review:{reviewId}`, payload `{decision, message?}` or the
  bare decision; `cancelled` accepts): the WebSocket's `approve` and `review_decision`.
- `messages` ending in `role: tool` messages: results of calls to the client's own tools
  (`tool_result`), the turn that waits for them goes on.
- `state.artifact` whose current content differs from the stored current version: the user
  edited the canvas (`edit_artifact`), applied before the new message.
"""

from __future__ import annotations

from typing import Any, Union

from ag_ui.core import ResumeEntry, RunAgentInput, TextPart, ToolMessage, UserMessage

from chat_agent.protocol import ApproveIn, ArtifactState, EditArtifactIn, ReviewDecisionIn, ToolResultIn
from chat_agent.web.agui_run import APPROVAL, REVIEW

Answer = Union[ApproveIn, ReviewDecisionIn, ToolResultIn]


def answers(run_input: RunAgentInput) -> list[Answer]:
    """The frames that answer what the turn waits for; ValueError for an answer we cannot read."""
    frames: list[Answer] = [_resumed(entry) for entry in run_input.resume or []]
    if frames and run_input.messages and isinstance(run_input.messages[-1], UserMessage):
        # The turn goes on once answered: a new message now would only be refused as busy.
        raise ValueError("a run that resumes interrupts carries no new user message; send it once the turn ended")
    return frames + [_result(message) for message in _trailing_results(run_input)]


def _resumed(entry: ResumeEntry) -> ApproveIn | ReviewDecisionIn:
    payload, resolved = entry.payload, entry.status == "resolved"
    message = payload.get("message") if isinstance(payload, dict) else None
    if message is not None and not isinstance(message, str):
        raise ValueError(f"resume {entry.interrupt_id}: payload.message must be a string")
    if entry.interrupt_id.startswith(APPROVAL):
        approved = payload.get("approved", True) if isinstance(payload, dict) else payload
        if approved is None:
            approved = True  # resolved with no payload: the user said yes
        if not isinstance(approved, bool):
            raise ValueError(f"resume {entry.interrupt_id}: payload.approved must be true or false")
        return ApproveIn(type="approve", tool_id=entry.interrupt_id[len(APPROVAL):], approved=resolved and approved,
                         message=message)
    if entry.interrupt_id.startswith(REVIEW):
        decision = payload.get("decision") if isinstance(payload, dict) else payload
        if not resolved:
            decision = "accept"
        if decision not in ("revise", "accept"):
            raise ValueError(f"resume {entry.interrupt_id}: payload.decision must be 'revise' or 'accept'")
        return ReviewDecisionIn(type="review_decision", review_id=entry.interrupt_id[len(REVIEW):],
                                decision=decision, message=message)
    raise ValueError(f"resume: {entry.interrupt_id!r} is not an interrupt of this agent")


def _trailing_results(run_input: RunAgentInput) -> list[ToolMessage]:
    """The tool messages after the client's last other message: results it has just made."""
    results: list[ToolMessage] = []
    for message in reversed(run_input.messages):
        if not isinstance(message, ToolMessage):
            break
        results.insert(0, message)
    return results


def _result(message: ToolMessage) -> ToolResultIn:
    content = message.content if isinstance(message.content, str) else "\n\n".join(
        part.text for part in message.content if isinstance(part, TextPart))
    if message.error:
        content = f"{message.error}\n\n{content}" if content else message.error
    return ToolResultIn(type="tool_result", tool_id=message.tool_call_id, content=content,
                        is_error=bool(message.error))


def canvas_edit(state: Any, stored: ArtifactState | None) -> EditArtifactIn | None:
    """The user's edit of the canvas: the client's state holds the stored current version with
    other content (or title). ValueError when it edited another version than the current one."""
    artifact = state.get("artifact") if isinstance(state, dict) else None
    current = artifact.get("current") if isinstance(artifact, dict) else None
    if not isinstance(current, dict) or stored is None or stored.current is None:
        return None
    if artifact.get("id") != stored.id or current.get("index") != stored.current.index:
        raise ValueError(f"state.artifact is version {current.get('index')} of {artifact.get('id')!r}; the current "
                         f"one is {stored.current.index} of {stored.id!r} (the run's STATE_SNAPSHOT has it)")
    content, title = current.get("content"), current.get("title")
    if not isinstance(content, str) or (title is not None and not isinstance(title, str)):
        raise ValueError("state.artifact.current: content and title must be strings")
    if content == stored.current.content and title in (None, stored.current.title):
        return None
    return EditArtifactIn(type="edit_artifact", content=content,
                          title=title if title != stored.current.title else None)

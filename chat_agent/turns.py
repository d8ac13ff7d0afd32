"""Checks a `message` frame and turns it into a turn: the user's message in both histories'
forms, the model, the tools offered, and the runner that will drive it."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

from .loop import Turn
from .prompts import SYSTEM_PROMPT
from .protocol import DocumentAttachment, ErrorCode, MessageIn, VisibleMessage
from .runner import TurnRunner, new_id

if TYPE_CHECKING:
    from .hub import Hub
    from .live import LiveConversation


class FrameRejected(Exception):
    """A well-formed client frame the server will not act on; answered with an `error`."""

    def __init__(self, code: ErrorCode, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


def _check_canvas(message: MessageIn) -> None:
    # No artifact can exist yet in this build (artifacts arrive with the canvas tools), so
    # every canvas request is refused the way PROTOCOL.md says it is without an artifact.
    canvas = message.canvas
    if canvas is not None and canvas.quick_action is not None:
        raise FrameRejected("no_artifact", "Quick actions need an artifact, and this conversation has none.")
    if canvas is not None and canvas.highlight is not None:
        raise FrameRejected("invalid_highlight", "There is no artifact to highlight in this conversation.")


def _documents(message: MessageIn) -> list[DocumentAttachment]:
    documents = []
    for attachment in message.attachments:
        if isinstance(attachment, DocumentAttachment) and attachment.content is not None:
            documents.append(attachment)
        else:
            raise FrameRejected("invalid_frame", "This server accepts only documents with their text in "
                                                 "`content`; image attachments and uploads are not enabled.")
    return documents


def _model_content(text: str, documents: list[DocumentAttachment]) -> list[dict[str, Any]]:
    blocks = [{"type": "text", "text": f"<document filename={json.dumps(d.filename or 'document')}>\n"
                                       f"{d.content}\n</document>"} for d in documents if d.content]
    return [*blocks, {"type": "text", "text": text}]


def tool_names(hub: "Hub", message: MessageIn) -> list[str]:
    wanted = message.settings
    names = hub.agent.registry.enabled()
    if not wanted.web_search:
        names = [n for n in names if n != "web_search"]
    if not wanted.enable_deep_research:
        names = [n for n in names if n != "deep_research"]
    return names


def prepare_turn(hub: "Hub", live: "LiveConversation",
                 message: MessageIn) -> tuple[TurnRunner, VisibleMessage, list[dict[str, Any]]]:
    _check_canvas(message)
    text = message.content.strip()
    if not text:
        raise FrameRejected("empty_message", "The message is empty.")
    documents = _documents(message)
    settings = hub.settings
    model = message.settings.model or settings.model
    if model not in settings.models:
        raise FrameRejected("invalid_frame", f"Model {model!r} is not available here; choose one of: "
                                             + ", ".join(settings.models))
    names = tool_names(hub, message)
    tools = hub.agent.registry.schemas(names)
    live.manager.estimate_overhead(lambda: hub.counter.text(SYSTEM_PROMPT) + hub.counter.text(json.dumps(tools)))
    turn = Turn(owner=live.owner, conversation_id=live.id, model=model, system=SYSTEM_PROMPT, tools=tools,
                thinking=message.settings.thinking)
    user = VisibleMessage(id=new_id("msg"), role="user", content=message.content, created_at=time.time(),
                          attachments=[{"type": "document", "filename": d.filename or "document"} for d in documents])
    return TurnRunner(live, hub.agent, turn), user, _model_content(message.content, documents)

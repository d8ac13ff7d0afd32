"""The body `useChat`'s default transport posts to `/api/chat` (PROTOCOL 1.2 "The AI SDK UI
message stream"), typed, and what it asks of the conversation: a new user message (its text
and file parts; `settings`, `canvas` and `attachments` of the WebSocket's `message` may ride
along in the body), a regenerated reply, or the user's answers to approval requests (the
reply's tool parts in the state `approval-responded`, sent back with the next request)."""

from __future__ import annotations

import base64
import binascii
import re
from typing import Annotated, Any, Literal, Union
from urllib.parse import unquote_to_bytes

from pydantic import BaseModel, ConfigDict, Discriminator, Field, StrictBool, StrictStr, Tag
from pydantic.alias_generators import to_camel

from chat_agent.protocol import ApproveIn, MessageIn

UPLOAD_URL = re.compile(r"(?:^|/)api/uploads/([A-Za-z0-9_.-]+)$")  # a file of POST /api/uploads, by its URL


class _Wire(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")


class TextUIPart(_Wire):
    type: Literal["text"]
    text: StrictStr


class FileUIPart(_Wire):
    type: Literal["file"]
    media_type: StrictStr
    url: StrictStr
    filename: StrictStr | None = None


class Approval(_Wire):
    id: StrictStr
    approved: StrictBool | None = None
    reason: StrictStr | None = None


class ToolUIPart(_Wire):
    type: StrictStr  # "tool-" + its name, or "dynamic-tool"
    tool_call_id: StrictStr
    state: StrictStr
    approval: Approval | None = None


class OtherUIPart(_Wire):
    type: StrictStr  # reasoning, data-*, step-start, sources...: nothing the server needs back


def _part_kind(value: Any) -> str:
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    if kind in ("text", "file"):
        return kind
    if isinstance(kind, str) and (kind.startswith("tool-") or kind == "dynamic-tool"):
        return "tool"
    return "other"


UIPart = Annotated[Union[Annotated[TextUIPart, Tag("text")], Annotated[FileUIPart, Tag("file")],
                         Annotated[ToolUIPart, Tag("tool")], Annotated[OtherUIPart, Tag("other")]],
                   Discriminator(_part_kind)]


class UIMessage(_Wire):
    id: StrictStr
    role: Literal["system", "user", "assistant"]
    parts: list[UIPart] = Field(default_factory=list)
    metadata: Any = None  # the app's own, any JSON; the server's replies carry an object (`seq`...)

    def seq(self) -> int | None:
        """The last frame's seq that the client has of this reply, as its stream's `finish` said."""
        seq = self.metadata.get("seq") if isinstance(self.metadata, dict) else None
        return seq if isinstance(seq, int) and not isinstance(seq, bool) and seq >= 0 else None


class ChatRequest(_Wire):
    id: Annotated[StrictStr, Field(pattern=r"^[A-Za-z0-9_.:-]{1,128}$")]
    messages: list[UIMessage] = Field(min_length=1)
    trigger: Literal["submit-message", "regenerate-message"] = "submit-message"
    message_id: StrictStr | None = None
    # The WebSocket `message`'s extras, as fields of the body (useChat's `body` option).
    settings: dict[str, Any] | None = None
    canvas: dict[str, Any] | None = None
    attachments: list[dict[str, Any]] = Field(default_factory=list)

    @property
    def last(self) -> UIMessage:
        return self.messages[-1]

    def approvals(self) -> list[ApproveIn]:
        """The user's answers to approval requests, from the reply the request continues."""
        return [ApproveIn(type="approve", tool_id=part.approval.id, approved=bool(part.approval.approved),
                          message=part.approval.reason)
                for part in self.last.parts if isinstance(part, ToolUIPart) and part.state == "approval-responded"
                and part.approval is not None]

    def message(self) -> MessageIn:
        """The new user message as the WebSocket's `message` (raises ValueError: 400)."""
        if self.last.role != "user":
            raise ValueError("the last message must be the user's new message (or a reply with the user's "
                             "answers to its approval requests)")
        texts = [part.text for part in self.last.parts if isinstance(part, TextUIPart)]
        files = [_attachment(part) for part in self.last.parts if isinstance(part, FileUIPart)]
        extras = {key: value for key, value in (("settings", self.settings), ("canvas", self.canvas)) if value}
        return MessageIn.model_validate({"type": "message", "content": "\n\n".join(texts),
                                         "attachments": [*files, *self.attachments], **extras})


def _attachment(part: FileUIPart) -> dict[str, Any]:
    """A file part as a `message` attachment: an upload by its URL (`/api/uploads/{id}`), an image
    by URL or data URL, or a text document inline as a data URL."""
    upload = UPLOAD_URL.search(part.url.split("?", 1)[0])
    kind = "image" if part.media_type.startswith("image/") else "document"
    if upload is not None:
        return {"type": kind, "uploadId": upload.group(1)}
    if part.url.startswith("data:"):
        header, _, payload = part.url.partition(",")
        if kind == "image":
            if ";base64" not in header:
                raise ValueError("an image data URL must be base64")
            return {"type": "image", "data": payload, "mediaType": part.media_type}
        if part.media_type.startswith("text/") or part.media_type in ("application/json", "text/markdown"):
            return {"type": "document", "content": _text(header, payload), "filename": part.filename or "document"}
    elif kind == "image" and part.url.startswith(("https://", "http://")):
        return {"type": "image", "url": part.url}
    raise ValueError(f"a {part.media_type} file must be uploaded first (POST /api/uploads) and sent by its URL "
                     "/api/uploads/{uploadId}")


def _text(header: str, payload: str) -> str:
    try:
        raw = base64.b64decode(payload, validate=True) if ";base64" in header else unquote_to_bytes(payload)
        return raw.decode("utf-8")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise ValueError("a text file's data URL must hold UTF-8 text") from None

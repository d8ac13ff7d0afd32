"""What a test scripts the fake Anthropic server to answer: replies, blocks and faults.

These are plain values; `anthropic_wire` turns them into the wire format.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import string
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

StopReason = Literal["end_turn", "tool_use", "max_tokens", "refusal", "pause_turn", "stop_sequence",
                     "model_context_window_exceeded"]


@dataclass(frozen=True)
class Text:
    text: str


@dataclass(frozen=True)
class CitedText:
    """Text that cites a search result of the request, as the API streams it: the block's
    text deltas, then a `citations_delta` with a `search_result_location`. `result` is the
    search result's 0-based index over the request's `search_result` blocks (tool results'
    included), in order; `quote` is the cited text (the result's whole text by default)."""

    text: str
    result: int = 0
    quote: str | None = None


@dataclass(frozen=True)
class ToolUse:
    name: str
    input: dict[str, Any] = field(default_factory=dict)
    id: str | None = None  # None: the server mints a fresh `toolu_...` id per reply
    # Streamed as the model wrote it instead of `input` as JSON: JSON that is broken (the
    # model does write such) or cut off (with `Reply(cut=True)`). A non-streamed reply has `input`.
    raw_json: str | None = None


@dataclass(frozen=True)
class Thinking:
    thinking: str
    # None: the server signs the text; a string is sent as is (to script a forged signature).
    signature: str | None = None


@dataclass(frozen=True)
class RedactedThinking:
    data: str | None = None  # None: the server mints opaque data it will accept back


Block = Text | CitedText | ToolUse | Thinking | RedactedThinking


@dataclass(frozen=True)
class Reply:
    """One model answer. `content` may be a plain string for a single text block."""

    content: Sequence[Block] | str
    stop_reason: StopReason | None = None  # None: `tool_use` if any ToolUse, else `end_turn`
    stop_sequence: str | None = None
    usage: dict[str, int] | None = None  # overrides fields of the computed usage
    chunk_size: int | None = None  # characters per text_delta / partial_json piece
    delay: float = 0.0  # seconds between SSE events
    # Seconds of silence before anything is sent, HTTP headers included: an API that took the
    # request and says nothing yet (overloaded behind a proxy, a model still loading).
    lead_delay: float = 0.0
    hang_after_events: int | None = None  # stop sending and wait for the client to leave
    model: str | None = None  # None: echo the request's model
    # The output limit struck inside the last block: a thinking block gets no signature
    # (no `signature_delta`), a tool_use block no `content_block_stop`. Stops with
    # `max_tokens` unless `stop_reason` says otherwise (`model_context_window_exceeded`).
    cut: bool = False
    # `stop_details` of `message_delta` and the Message, as the API explains a refusal:
    # {"type": "refusal", "category": "cyber" | ... | None, "explanation": str | None}.
    stop_details: dict[str, Any] | None = None

    @property
    def blocks(self) -> list[Block]:
        return [Text(self.content)] if isinstance(self.content, str) else list(self.content)

    @property
    def final_stop_reason(self) -> StopReason:
        if self.stop_reason is not None:
            return self.stop_reason
        if self.cut:
            return "max_tokens"
        return "tool_use" if any(isinstance(b, ToolUse) for b in self.blocks) else "end_turn"


_DEFAULT_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}

_DEFAULT_MESSAGES = {
    "rate_limit_error": "This request would exceed the rate limit for your organization of 50 requests per minute. "
    "For details, refer to: https://docs.claude.com/en/api/rate-limits.",
    "overloaded_error": "Overloaded",
    "api_error": "Internal server error",
    "timeout_error": "Request timed out",
}

STATUS_FOR_ERROR_TYPE = {v: k for k, v in _DEFAULT_ERROR_TYPES.items()}


@dataclass
class ApiError(Exception):
    """An error response the fake sends: raised by validation, or made from a `Fault`."""

    status: int
    error_type: str
    message: str


def invalid(message: str) -> ApiError:
    return ApiError(400, "invalid_request_error", message)


@dataclass(frozen=True)
class Fault:
    """An injected failure. Build with `Fault.status`, `Fault.midstream_error` or `Fault.hang`."""

    kind: Literal["status", "midstream_error", "hang"]
    status_code: int = 200
    error_type: str = "overloaded_error"
    message: str = "Overloaded"
    headers: dict[str, str] = field(default_factory=dict)
    after_events: int = 0
    reply: Reply | None = None  # the stream to cut; None: what the responder would have said

    @classmethod
    def status(
        cls,
        code: int,
        error_type: str | None = None,
        message: str | None = None,
        *,
        retry_after: float | None = None,
        headers: dict[str, str] | None = None,
    ) -> Fault:
        etype = error_type or _DEFAULT_ERROR_TYPES.get(code, "api_error")
        extra = dict(headers or {})
        if retry_after is None and code == 429:
            retry_after = 1  # the real API always tells a rate-limited client when to come back
        if retry_after is not None:
            extra["retry-after"] = _format_seconds(retry_after)
        return cls("status", code, etype, message or _DEFAULT_MESSAGES.get(etype, etype), extra)

    @classmethod
    def midstream_error(
        cls,
        after_events: int = 3,
        error_type: str = "overloaded_error",
        message: str | None = None,
        *,
        reply: Reply | None = None,
    ) -> Fault:
        msg = message or _DEFAULT_MESSAGES.get(error_type, error_type)
        return cls("midstream_error", 200, error_type, msg, {}, after_events, reply)

    @classmethod
    def hang(cls, after_events: int, *, reply: Reply | None = None) -> Fault:
        return cls("hang", after_events=after_events, reply=reply)


def _format_seconds(seconds: float) -> str:
    return str(int(seconds)) if float(seconds).is_integer() else str(seconds)


Item = Reply | Fault

_ALPHABET = string.ascii_letters + string.digits


def new_id(prefix: str) -> str:
    """Ids shaped like the real ones (`msg_01...`, `toolu_01...`, `req_011C...`)."""
    return prefix + "".join(secrets.choice(_ALPHABET) for _ in range(22))


class Signer:
    """Signs thinking text with a per-server secret so forged or edited blocks are caught."""

    def __init__(self) -> None:
        self._key = secrets.token_bytes(32)

    def _mac(self, data: bytes) -> bytes:
        return hmac.new(self._key, data, hashlib.sha256).digest()

    def sign(self, thinking: str) -> str:
        return base64.b64encode(self._mac(b"thinking:" + thinking.encode())).decode()

    def verify(self, thinking: str, signature: str) -> bool:
        return hmac.compare_digest(self.sign(thinking), signature)

    def redacted_data(self) -> str:
        nonce = secrets.token_bytes(24)
        return base64.b64encode(nonce + self._mac(b"redacted:" + nonce)).decode()

    def verify_redacted(self, data: str) -> bool:
        try:
            raw = base64.b64decode(data, validate=True)
        except ValueError:
            return False
        nonce, mac = raw[:24], raw[24:]
        return hmac.compare_digest(self._mac(b"redacted:" + nonce), mac)


# ---- the reviewer's verdicts (PROTOCOL 1.2 "Review") -----------------------------------------

REVIEW_TOOL = "submit_review"  # the tool the server forces on its reviewer calls


def is_review(body: dict) -> bool:
    """A reviewer call: the server forces its verdict tool."""
    choice = body.get("tool_choice") or {}
    return choice.get("type") == "tool" and choice.get("name") == REVIEW_TOOL


def Verdict(passed: bool, score: float, feedback: str = "", suggestions: tuple[str, ...] | list[str] = (),  # noqa: N802 - reads like the Reply it is
            **reply: object) -> Reply:
    """The reviewer's answer: its forced tool call with this verdict."""
    text = feedback or ("Meets the request." if passed else "Misses what was asked.")
    return Reply([ToolUse(REVIEW_TOOL, {"passed": passed, "score": score, "feedback": text,
                                        "suggestions": list(suggestions)})], **reply)  # type: ignore[arg-type]

"""What the ReAct loop yields. Plain values, no I/O: the sessions turn them into frames.

Text and thinking deltas are the model client's own values, passed through as they come."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Union

from chat_agent.model.types import TextDelta, ThinkingDelta
from chat_agent.protocol import (ArtifactEdit, ArtifactFrame, ArtifactTarget, Citation, ImageTarget, ReviewDecision,
                                 StopReason, Usage)


@dataclass(slots=True)
class ArtifactDelta:
    """New artifact text the model is writing into a canvas tool's input."""

    tool_id: str
    text: str


@dataclass(slots=True)
class ArtifactChanged:
    """A tool changed the canvas: what clients are told of it (`artifact` or `artifact_edit`)."""

    frame: ArtifactFrame | ArtifactEdit


@dataclass(slots=True)
class Cited:
    """The reply cites a chunk of the user's knowledge, for the text streamed so far."""

    citation: Citation


@dataclass(slots=True)
class ToolStarted:
    tool_id: str
    name: str
    input: dict[str, Any]


@dataclass(slots=True)
class ApprovalRequested:
    """A call that waits for the user's consent before it runs."""

    tool_id: str
    name: str
    input: dict[str, Any]


@dataclass(slots=True)
class Reviewed:
    """The reviewer's verdict on what the turn made (1.2 "Review")."""

    review_id: str
    target: ArtifactTarget | ImageTarget
    passed: bool
    score: float
    feedback: str
    suggestions: list[str]
    revision: int  # revisions before this result


@dataclass(slots=True)
class ReviewAsked:
    """A failed review waits for the user's decision."""

    review_id: str


@dataclass(slots=True)
class ReviewAnswered:
    """A review the user was asked about got its decision (or was accepted without them)."""

    review_id: str
    decision: ReviewDecision
    message: str | None = None
    reason: Literal["timed_out", "aborted"] | None = None


@dataclass(slots=True)
class ToolProgressed:
    tool_id: str
    elapsed: float
    status: str


@dataclass(slots=True)
class ToolEnded:
    tool_id: str
    name: str
    output: Any
    duration: float
    is_error: bool


@dataclass(slots=True)
class ContextChanged:
    tokens: int
    max_tokens: int
    summarized: bool = False
    usage: Usage | None = None  # what the turn used so far, once a model call's reply is in the history


@dataclass(slots=True)
class ModelWaiting:
    """A model call has sent nothing yet (`elapsed` seconds since it began); told at a steady
    pace while that lasts, so that a silent model is not silence for the user."""

    elapsed: float


@dataclass(slots=True)
class ModelRetrying:
    """A model call failed before anything of it was shown and is tried again."""

    attempt: int  # the attempt about to start: 2 for the first retry
    attempts: int  # attempts at most
    reason: str  # why, to follow "The model API ": "is overloaded (529)"
    delay: float  # seconds before it starts
    elapsed: float  # seconds since the call began


@dataclass(slots=True)
class TurnFailed:
    """An error the client should see; the loop still finishes with `TurnFinished("error")`."""

    code: Literal["llm_error", "rate_limited", "internal"]
    message: str


@dataclass(slots=True)
class TurnFinished:
    stop_reason: StopReason
    usage: Usage = field(default_factory=Usage)
    detail: str | None = None  # a refusal's explanation, or what the provider could not do


Event = Union[TextDelta, ThinkingDelta, Cited, ArtifactDelta, ArtifactChanged, ToolStarted, ApprovalRequested,
              ToolProgressed, ToolEnded, ContextChanged, ModelWaiting, ModelRetrying, TurnFailed, TurnFinished, Reviewed,
              ReviewAsked, ReviewAnswered]

"""What the ReAct loop yields. Plain values, no I/O: the sessions turn them into frames.

Text and thinking deltas are the model client's own values, passed through as they come."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Union

from chat_agent.model.types import TextDelta, ThinkingDelta
from chat_agent.protocol import StopReason, Usage


@dataclass(slots=True)
class ArtifactDelta:
    """New artifact text the model is writing into a canvas tool's input."""

    tool_id: str
    text: str


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


Event = Union[TextDelta, ThinkingDelta, ArtifactDelta, ToolStarted, ApprovalRequested, ToolProgressed, ToolEnded,
              ContextChanged, TurnFailed, TurnFinished]

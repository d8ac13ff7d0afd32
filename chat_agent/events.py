"""What the ReAct loop yields. Plain values, no I/O: the server turns them into frames."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Union

StopReason = Literal["end_turn", "aborted", "max_steps", "max_tokens", "refusal", "error"]


@dataclass(slots=True)
class TokenUsage:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0

    def add(self, other: "TokenUsage") -> None:
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        self.cache_read_tokens += other.cache_read_tokens
        self.cache_write_tokens += other.cache_write_tokens

    @property
    def prompt_tokens(self) -> int:
        """Everything the model read, cached or not: the size of the context it saw."""
        return self.input_tokens + self.cache_read_tokens + self.cache_write_tokens


@dataclass(slots=True)
class TextDelta:
    text: str


@dataclass(slots=True)
class ThinkingDelta:
    text: str


@dataclass(slots=True)
class ToolInputDelta:
    """A piece of a tool call's JSON input as the model writes it (from the model client)."""

    tool_id: str
    name: str
    piece: str


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
    usage: TokenUsage = field(default_factory=TokenUsage)


Event = Union[TextDelta, ThinkingDelta, ArtifactDelta, ToolStarted, ToolProgressed, ToolEnded,
              ContextChanged, TurnFailed, TurnFinished]

"""The reviewer (PROTOCOL 1.2 "Review"): one model call that judges what a turn made.

It reads the user's request, the user's memories, and the result: the artifact before and
after the turn, or the image the turn made (shown to the model, which must see images). It
answers by a forced tool call whose input is validated here (`Verdict`), so a verdict is
always well formed or the review fails (`ReviewFailed`), never half read.

A review that asks the user waits at the turn's `ReviewGate`, the way a call that needs
approval waits at its `ApprovalGate`: until the user answers, the wait times out (accepted),
or the turn is cancelled (abort).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from chat_agent.agent.pending import Pending
from chat_agent.model import LLMError, ModelClient, ModelRequest
from chat_agent.protocol import ReviewDecision, Usage
from chat_agent.store import ArtifactVersionRecord, MemoriesRecord

TOOL_NAME = "submit_review"
CONTENT_CHARS = 60_000  # of each artifact version shown to the reviewer
REQUEST_CHARS = 8_000
MAX_TOKENS = 1024

SYSTEM_PROMPT = """You review the work of an AI assistant in a canvas app, where users write documents and code with it. You get the user's request, what the user asked to be remembered about them (style rules and facts), and the result: the artifact before and after the assistant changed it, or an image it made.

Judge only whether the result does what the user asked, in the way the memories say they want it. Do not judge the request itself. Be strict about what was asked and lenient about taste. Then call submit_review: passed (true when the user would accept it as it is), score (0 to 1: how well it meets the request), feedback (one to three sentences a writer can act on: what is wrong or missing, or what is right when it passed), suggestions (concrete changes, most important first; none when it passed)."""

Feedback = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=2000)]
Suggestion = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=500)]


class Verdict(BaseModel):
    """The reviewer's answer, as its tool's input."""

    model_config = ConfigDict(extra="ignore")
    passed: bool = Field(description="True when the user would accept the result as it is.")
    score: float = Field(ge=0, le=1, description="How well the result meets the request, 0 to 1.")
    feedback: Feedback = Field(description="What is wrong or missing, or what is right; one to three sentences.")
    suggestions: list[Suggestion] = Field(default_factory=list, max_length=10,
                                          description="Concrete changes, most important first.")


TOOL = {"name": TOOL_NAME, "description": "Give your verdict on the result.",
        "input_schema": {"type": "object", "properties": {
            "passed": {"type": "boolean", "description": "True when the user would accept the result as it is."},
            "score": {"type": "number", "minimum": 0, "maximum": 1,
                      "description": "How well the result meets the request, 0 to 1."},
            "feedback": {"type": "string", "description": "What is wrong or missing, or what is right."},
            "suggestions": {"type": "array", "items": {"type": "string"}, "maxItems": 10,
                            "description": "Concrete changes, most important first."}},
            "required": ["passed", "score", "feedback", "suggestions"]}}


class ReviewFailed(Exception):
    """The reviewer could not give a verdict (the call failed, or its answer was not one);
    `usage`: what a call that answered used all the same (the turn counts it)."""

    def __init__(self, message: str, usage: Usage | None = None):
        super().__init__(message)
        self.usage = usage


@dataclass(frozen=True, slots=True)
class Subject:
    """What is reviewed: the artifact's versions around the turn, or an image it made."""

    request: str  # the user's message that started the turn
    memories: MemoriesRecord | None
    before: ArtifactVersionRecord | None = None
    after: ArtifactVersionRecord | None = None
    image: dict[str, Any] | None = None  # the image as the model sees it (an image block)
    image_label: str = ""


async def review(model: ModelClient, model_name: str, subject: Subject) -> tuple[Verdict, Usage]:
    """The verdict on `subject`, and what the call used. Raises ReviewFailed."""
    request = ModelRequest(model=model_name, max_tokens=MAX_TOKENS, system=SYSTEM_PROMPT,
                           messages=[{"role": "user", "content": _content(subject)}], tools=[TOOL],
                           tool_choice={"type": "tool", "name": TOOL_NAME})
    try:
        reply = await model.call(request)
    except LLMError as exc:
        raise ReviewFailed(f"the reviewer's model call failed: {exc.message}") from None
    for block in reply.content:
        if block.get("type") == "tool_use" and block.get("name") == TOOL_NAME:
            try:
                return Verdict.model_validate(block.get("input") or {}), reply.usage
            except ValidationError as exc:
                raise ReviewFailed(f"the reviewer's verdict was not valid: {exc.errors()[0]['msg']}",
                                   reply.usage) from None
    raise ReviewFailed("the reviewer gave no verdict", reply.usage)


def _content(subject: Subject) -> list[dict[str, Any]]:
    parts = [f"<request>\n{_clip(subject.request, REQUEST_CHARS) or '(no text)'}\n</request>",
             _memories(subject.memories)]
    if subject.image is not None:
        parts.append(f"The result is the image below ({subject.image_label}).")
        return [{"type": "text", "text": "\n\n".join(parts)}, subject.image,
                {"type": "text", "text": f"Call {TOOL_NAME} with your verdict on this image."}]
    parts.append(_version("artifact_before", subject.before) if subject.before is not None
                 else "<artifact_before>\n(none: the assistant created the artifact in this turn)\n</artifact_before>")
    parts.append(_version("artifact_after", subject.after))
    parts.append(f"Call {TOOL_NAME} with your verdict on artifact_after.")
    return [{"type": "text", "text": "\n\n".join(parts)}]


def _memories(record: MemoriesRecord | None) -> str:
    rules = "\n".join(f"- {rule}" for rule in record.style_rules) if record else ""
    facts = "\n".join(f"- {fact}" for fact in record.content) if record else ""
    return (f"<memories>\nStyle rules:\n{rules or '(none)'}\nFacts about the user:\n{facts or '(none)'}\n"
            "</memories>")


def _version(tag: str, version: ArtifactVersionRecord | None) -> str:
    if version is None:
        return f"<{tag}>\n(none)\n</{tag}>"
    language = f' language="{version.language}"' if version.language else ""
    return (f'<{tag} version="{version.index}" type="{version.type}" title="{version.title}"{language}>\n'
            f"{_clip(version.content, CONTENT_CHARS)}\n</{tag}>")


def _clip(text: str, limit: int) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[:limit] + "\n[…]"


# ---- waiting for the user -----------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Answer:
    decision: ReviewDecision
    message: str | None = None
    reason: Literal["timed_out"] | None = None


@dataclass(slots=True)
class ReviewGate:
    """Where a failed review waits for the user's `review_decision`; accepted once `timeout`
    seconds pass without one. One per turn."""

    timeout: float = 600.0
    _waiting: Pending[Answer] = field(default_factory=Pending)

    async def wait(self, review_id: str) -> Answer:
        return await self._waiting.wait(review_id, self.timeout, Answer("accept", reason="timed_out"))

    def answer(self, review_id: str, decision: ReviewDecision, message: str | None = None) -> bool:
        """Settles a waiting review; False when none of this turn waits under that id."""
        return self._waiting.settle(review_id, Answer(decision, message))


@dataclass(frozen=True, slots=True)
class ReviewPolicy:
    """How a turn is reviewed: settled before it starts (the message's settings over the server's)."""

    model: str  # the reviewer's
    max_revisions: int = 1
    decision: Literal["auto", "ask"] = "auto"
    gate: ReviewGate = field(default_factory=ReviewGate)

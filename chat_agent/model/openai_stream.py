"""Streamed Chat Completions chunks into deltas and one ModelReply in the Messages API's shapes.

A tool call arrives in pieces keyed by `index`: the first carries its id and name, the rest
pieces of its arguments' JSON, and calls may interleave. Each piece goes on as a
ToolInputDelta as soon as its call's id and name are known. Usage comes in a last chunk
without choices (`stream_options.include_usage`). Servers differ in small ways that are
tolerated here: a call without an id gets one, a reply with calls that says `stop` stopped
for its calls, and reasoning text some servers stream (`reasoning_content`, `reasoning`)
is shown as thinking (it carries no signature, so it stays out of the history).

Chunks come as the API's JSON (the SDK's stream with `object` as its type): building an SDK
model per chunk cost more CPU than the rest of a relayed delta's way.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field
from typing import Any

from chat_agent.model.types import ModelReply, StreamItem, TextDelta, ThinkingDelta, ToolInputDelta
from chat_agent.protocol import Usage
from chat_agent.text import scrub, scrub_json

# finish_reason → the Messages API's stop_reason
STOP_REASONS = {"stop": "end_turn", "tool_calls": "tool_use", "function_call": "tool_use", "length": "max_tokens",
                "content_filter": "refusal"}
REASONING_FIELDS = ("reasoning_content", "reasoning")
CONTENT_FILTERED = "The provider's content filter stopped the reply."


def _field(value: Any, name: str) -> Any:
    """A field of a streamed chunk's JSON or of the SDK's object of a whole completion."""
    return value.get(name) if isinstance(value, dict) else getattr(value, name, None)


def usage_of(usage: Any) -> Usage:
    """Chat Completions counts cached tokens inside prompt_tokens; the Messages API (and so
    `Usage`) counts them apart."""
    if usage is None:
        return Usage()
    cached = _field(_field(usage, "prompt_tokens_details"), "cached_tokens") or 0
    prompt = _field(usage, "prompt_tokens") or 0
    return Usage(input_tokens=max(0, prompt - cached), output_tokens=_field(usage, "completion_tokens") or 0,
                 cache_read_tokens=cached)


def tool_block(call_id: str, name: str, raw: str) -> tuple[dict[str, Any], str | None]:
    """A tool_use block for a call, and its raw arguments when they are not a JSON object
    (the call then has an empty input and must not run)."""
    if not raw.strip():
        return {"type": "tool_use", "id": call_id, "name": name, "input": {}}, None
    try:
        value = json.loads(raw)
    except ValueError:
        value = None
    if not isinstance(value, dict):
        return {"type": "tool_use", "id": call_id, "name": name, "input": {}}, raw
    return {"type": "tool_use", "id": call_id, "name": name, "input": scrub_json(value)}, None


def stop_reason_of(finish: str | None, has_calls: bool) -> str:
    if has_calls and finish in (None, "stop", "tool_calls", "function_call"):
        return "tool_use"
    return STOP_REASONS.get(finish or "stop", "end_turn")


@dataclass(slots=True)
class _Call:
    id: str | None = None
    name: str | None = None
    pending: list[str] = field(default_factory=list)  # argument pieces before id and name came
    raw: list[str] = field(default_factory=list)


class ChunkAccumulator:
    """Feed it the chunks in order; it returns the deltas to yield for each."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.refusal: list[str] = []
        self.calls: dict[int, _Call] = {}
        self.finish: str | None = None
        self.usage: Any = None
        self.thought = False  # some reasoning text was streamed
        self.id: str | None = None
        self.model: str | None = None

    def feed(self, chunk: dict[str, Any]) -> list[StreamItem]:
        self.id = self.id or chunk.get("id")
        self.model = self.model or chunk.get("model")
        if chunk.get("usage") is not None:
            self.usage = chunk["usage"]
        items: list[StreamItem] = []
        for choice in chunk.get("choices") or []:
            if choice.get("index", 0) != 0:
                continue  # n=1 is asked for; a server sending more is not listened to
            items += self._delta(choice.get("delta"))
            if choice.get("finish_reason"):
                self.finish = choice["finish_reason"]
        return items

    def _delta(self, delta: dict[str, Any] | None) -> list[StreamItem]:
        if not delta:
            return []
        items: list[StreamItem] = []
        for name in REASONING_FIELDS:
            thought = delta.get(name)
            if isinstance(thought, str) and thought:
                self.thought = True
                items.append(ThinkingDelta(scrub(thought)))
        content = delta.get("content")
        if isinstance(content, str) and content:
            text = scrub(content)
            self.text.append(text)
            items.append(TextDelta(text))
        if isinstance(delta.get("refusal"), str) and delta["refusal"]:
            self.refusal.append(delta["refusal"])
        for piece in delta.get("tool_calls") or []:
            items += self._tool_piece(piece)
        return items

    def _tool_piece(self, piece: dict[str, Any]) -> list[StreamItem]:
        call = self.calls.setdefault(piece.get("index", 0), _Call())
        function = piece.get("function") or {}
        call.id = call.id or piece.get("id")
        if function.get("name") and not call.name:
            call.name = function["name"]
            call.id = call.id or "call_" + secrets.token_hex(12)  # servers that send none
        arguments = function.get("arguments") or ""
        if arguments:
            call.raw.append(arguments)
        if call.name is None:
            call.pending.append(arguments)
            return []
        pieces, call.pending = [*call.pending, arguments], []
        return [ToolInputDelta(call.id or "", call.name, scrub(p)) for p in pieces if p]

    def reply(self) -> ModelReply:
        if self.finish is None:
            raise ValueError("the stream ended before the reply finished")
        content: list[dict[str, Any]] = []
        text = "".join(self.text)
        if text:
            content.append({"type": "text", "text": text})
        invalid: dict[str, str] = {}
        for _, call in sorted(self.calls.items()):
            if call.name is None:
                continue  # arguments without a function: nothing to run
            block, broken = tool_block(call.id or "", call.name, "".join(call.raw))
            content.append(block)
            if broken is not None:
                invalid[block["id"]] = scrub(broken)
        stop = stop_reason_of(self.finish, any(b["type"] == "tool_use" for b in content))
        refusal = scrub("".join(self.refusal)).strip() or None
        return _reply(content, stop, self.usage, invalid, refusal, self.finish)


def reply_of_completion(completion: Any) -> ModelReply:
    """A finished (not streamed) ChatCompletion as a ModelReply."""
    if not completion.choices:
        raise ValueError("the reply has no choices")
    choice = completion.choices[0]
    message = choice.message
    content: list[dict[str, Any]] = []
    if message.content:
        content.append({"type": "text", "text": scrub(message.content)})
    invalid: dict[str, str] = {}
    for call in message.tool_calls or []:
        function = getattr(call, "function", None)
        if function is None:
            continue
        block, broken = tool_block(call.id or "call_" + secrets.token_hex(12), function.name, function.arguments or "")
        content.append(block)
        if broken is not None:
            invalid[block["id"]] = scrub(broken)
    stop = stop_reason_of(choice.finish_reason, bool(message.tool_calls))
    refusal = getattr(message, "refusal", None)
    return _reply(content, stop, completion.usage, invalid, scrub(refusal) if refusal else None, choice.finish_reason)


def _reply(content: list[dict[str, Any]], stop: str, usage: Any, invalid: dict[str, str], refusal: str | None,
           finish: str | None) -> ModelReply:
    """A model's refusal (its `refusal` text) and a provider's filter both stop as a refusal."""
    if refusal is not None:
        stop = "refusal"
    elif finish == "content_filter":
        refusal = CONTENT_FILTERED
    return ModelReply(content, stop, usage_of(usage), invalid_calls=invalid, stop_detail=refusal)

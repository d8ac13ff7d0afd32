"""The fake's answer when nothing is scripted: deterministic, driven by the last user message.

Directives in that text: `[[tool NAME {json}]]` (one tool_use each), `[[slow SECONDS]]`,
`[[long WORDS]]`, `[[error TYPE]]`. See `default_reply`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from typing import Any

from tests.fakes.anthropic_script import Block, Fault, Item, Reply, Text, Thinking, ToolUse, Verdict, is_review
from tests.fakes.anthropic_turns import blocks_of
from tests.fakes.anthropic_validate import thinking_enabled

SLOW_WORDS = 40
SLOW_EVENTS = SLOW_WORDS + 6  # start, block start, ping, block stop, delta, stop
_DIRECTIVE = re.compile(r"\[\[(tool|slow|long|error)\s+([^\s\]]+)")
_DECODER = json.JSONDecoder()


@dataclass
class Directives:
    tools: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    slow: float | None = None
    long: int | None = None
    error: str | None = None


def default_reply(body: dict[str, Any]) -> Item:
    if is_review(body):  # a reviewer with nothing scripted passes the result
        return Verdict(True, 0.9)
    if _is_summary_call(body):
        reply = Reply([Text("Summary: the conversation so far, in brief.")])
        return _with_thinking(body, reply, "a summary")
    last = _last_user_blocks(body["messages"])
    results = [b for b in last if b.get("type") == "tool_result"]
    if results:
        return _with_thinking(body, Reply([Text("Done: " + _digest(results))]), "the tool results")
    text = "\n".join(b["text"] for b in last if b.get("type") == "text")
    return _reply_to_text(body, text, parse_directives(text))


def _is_summary_call(body: dict[str, Any]) -> bool:
    # A summarization call offers no tools; requiring that keeps a summary that sits inside
    # the main agent's system prompt from hijacking every reply.
    return "summar" in _system_text(body).lower() and not body.get("tools")


def _system_text(body: dict[str, Any]) -> str:
    system = body.get("system") or ""
    return system if isinstance(system, str) else " ".join(b.get("text", "") for b in system)


def _last_user_blocks(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    users = [m for m in messages if m["role"] == "user"]
    return blocks_of(users[-1]) if users else []


def _digest(results: list[dict[str, Any]]) -> str:
    return "; ".join(_result_text(r)[:200] for r in results)


def _result_text(result: dict[str, Any]) -> str:
    content = result.get("content", "")
    if isinstance(content, str):
        return content
    return " ".join(b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text")


def parse_directives(text: str) -> Directives:
    found = Directives()
    for match in _DIRECTIVE.finditer(text):
        kind, arg = match.groups()
        if kind == "tool":
            found.tools.append((arg, _tool_input(text, match.end())))
        elif kind == "slow" and found.slow is None:
            found.slow = float(arg)
        elif kind == "long" and found.long is None:
            found.long = int(arg)
        elif kind == "error" and found.error is None:
            found.error = arg
    return found


def _tool_input(text: str, at: int) -> dict[str, Any]:
    rest = text[at:].lstrip()
    if not rest.startswith("{"):
        return {}
    value, _ = _DECODER.raw_decode(rest)
    return value if isinstance(value, dict) else {}


def _reply_to_text(body: dict[str, Any], text: str, found: Directives) -> Item:
    tools = _tool_calls(body, found)
    words = found.long or (SLOW_WORDS if found.slow is not None else 0)
    if words:
        prose = " ".join(f"word{n}" for n in range(1, words + 1))
    else:
        prose = "Calling tools." if tools else "Echo: " + text
    blocks: list[Block] = [] if _forced(body) else [Text(prose)]
    reply = _fit(body, Reply([*blocks, *tools], chunk_size=40 if found.long else None))
    if found.slow is not None:
        reply = replace(reply, delay=found.slow / SLOW_EVENTS)
    reply = _with_thinking(body, reply, text[:60])
    if found.error:
        return Fault.midstream_error(after_events=3, error_type=found.error, reply=reply)
    return reply


def _forced(body: dict[str, Any]) -> bool:
    return (body.get("tool_choice") or {}).get("type") in ("any", "tool")


def _tool_calls(body: dict[str, Any], found: Directives) -> list[ToolUse]:
    """Tool calls as the model would make them: only offered tools, honoring `tool_choice`."""
    offered = {t["name"]: t for t in body.get("tools") or [] if "name" in t}
    choice = body.get("tool_choice") or {"type": "auto"}
    if choice["type"] == "none":
        return []
    calls = [ToolUse(name, args) for name, args in found.tools if name in offered]
    if choice["type"] == "tool":
        named = [c for c in calls if c.name == choice["name"]]
        return named[:1] or [ToolUse(choice["name"], example_input(offered[choice["name"]]))]
    if choice["type"] == "any" and not calls:
        first = next(iter(offered.values()))
        return [ToolUse(first["name"], example_input(first))]
    return calls


def example_input(tool: dict[str, Any]) -> dict[str, Any]:
    """A minimal input satisfying the tool's schema: every required property, a placeholder each."""
    schema = tool.get("input_schema") or {}
    props = schema.get("properties") or {}
    return {name: _example_value(name, props.get(name) or {}) for name in schema.get("required") or []}


def _example_value(name: str, schema: dict[str, Any]) -> Any:
    if "enum" in schema:
        return schema["enum"][0]
    if "default" in schema:
        return schema["default"]
    for option in schema.get("anyOf") or schema.get("oneOf") or []:
        return _example_value(name, option)
    kind = schema.get("type", "string")
    kind = kind[0] if isinstance(kind, list) else kind
    placeholders = {"integer": 1, "number": 1, "boolean": True, "array": [], "object": {}, "null": None}
    return placeholders.get(kind, f"fake {name}")


def _fit(body: dict[str, Any], reply: Reply) -> Reply:
    """Stop at a stop sequence or at `max_tokens`, as the model would."""
    blocks, stop, sequence = reply.blocks, reply.final_stop_reason, None
    if blocks and isinstance(blocks[0], Text):
        text = blocks[0].text
        for seq in body.get("stop_sequences") or []:
            if seq in text:
                text, stop, sequence, blocks = text[: text.index(seq)], "stop_sequence", seq, blocks[:1]
        budget = body["max_tokens"] * 4
        if len(text) > budget:
            text, stop, sequence, blocks = text[:budget], "max_tokens", None, blocks[:1]
        blocks = [Text(text), *blocks[1:]] if text else blocks[1:]
    return replace(reply, content=blocks, stop_reason=stop, stop_sequence=sequence)


def _with_thinking(body: dict[str, Any], reply: Reply, topic: str) -> Reply:
    if not thinking_enabled(body):
        return reply
    return replace(reply, content=[Thinking(f"Let me think about {topic}."), *reply.blocks])

"""Where to cut the model-facing history for a summary, and what the summary looks like.

Pure functions over the API's message dicts, so the rules (never split a tool_use from its
tool_result, keep the recent turns verbatim) are easy to test on their own.
"""

from __future__ import annotations

import json
from typing import Any

from chat_agent.context.tokens import content_chars

SYSTEM_PROMPT = (
    "You condense conversations between a user and an AI assistant so the assistant can go on "
    "without the full transcript. Write a faithful summary in the conversation's language: the "
    "user's goals and preferences, facts and decisions established, what tools found (keep names, "
    "numbers, URLs), work in progress and open questions. No preamble."
)
TOOL_RESULT_CHARS = 2_000
TRANSCRIPT_CHARS = 400_000


def _has_tool_result(message: dict[str, Any]) -> bool:
    content = message["content"]
    return isinstance(content, list) and any(b.get("type") == "tool_result" for b in content)


def valid_cut(messages: list[dict[str, Any]], k: int) -> bool:
    """Cutting before index k keeps every tool_use with its tool_result on one side."""
    if not 0 < k < len(messages):
        return False
    first = messages[k]
    return first["role"] == "assistant" or not _has_tool_result(first)


def window(messages: list[dict[str, Any]], count: int) -> list[dict[str, Any]]:
    """The last `count` messages, trimmed at the front until they start validly (a user
    message that is no tool_result), for a request that shows only recent history."""
    recent = messages[-count:] if count > 0 else []
    while recent and (recent[0]["role"] != "user" or _has_tool_result(recent[0])):
        recent = recent[1:]
    return recent


def choose_cut(messages: list[dict[str, Any]], keep_chars: int) -> int | None:
    """The latest valid cut that still keeps at least `keep_chars` of recent history verbatim,
    or, if every valid cut keeps less, the earliest one."""
    kept = 0
    earliest: int | None = None
    for k in range(len(messages) - 1, 0, -1):
        kept += content_chars(messages[k]["content"])
        if valid_cut(messages, k):
            if kept >= keep_chars:
                return k
            earliest = k
    return earliest


def _render_block(block: dict[str, Any]) -> str:
    kind = block.get("type")
    if kind == "text":
        return block.get("text", "")
    if kind == "tool_use":
        return f"[called tool {block.get('name')} with {json.dumps(block.get('input', {}), ensure_ascii=False)}]"
    if kind == "tool_result":
        inner = block.get("content", "")
        text = inner if isinstance(inner, str) else " ".join(_render_block(b) for b in inner)
        flag = " (error)" if block.get("is_error") else ""
        return f"[tool result{flag}: {text[:TOOL_RESULT_CHARS]}]"
    if kind in ("image", "document"):
        return f"[{kind}]"
    return ""  # thinking is the model's scratch work, not part of what happened


def render_transcript(messages: list[dict[str, Any]]) -> str:
    parts = []
    for message in messages:
        content = message["content"]
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        body = "\n".join(filter(None, map(_render_block, blocks)))
        parts.append(f"{message['role'].upper()}: {body}")
    transcript = "\n\n".join(parts)
    if len(transcript) > TRANSCRIPT_CHARS:  # the small model's window; the newest part matters most
        transcript = "[… earliest part omitted …]\n" + transcript[-TRANSCRIPT_CHARS:]
    return transcript


def plan_summary(messages: list[dict[str, Any]], keep_chars: int) -> tuple[int, str] | None:
    cut = choose_cut(messages, keep_chars)
    if cut is None:
        return None
    return cut, render_transcript(messages[:cut])


def summary_message(summary: str, first_kept: dict[str, Any] | None) -> dict[str, Any]:
    """The user message that opens the summarized history. If the kept part starts with a user
    message, the summary goes in front of its content so roles still alternate."""
    block = {"type": "text", "text": (
        "<conversation_summary>\n" + summary + "\n</conversation_summary>\n"
        "(The earlier part of this conversation is summarized above; what follows is verbatim.)")}
    if first_kept is not None and first_kept["role"] == "user":
        content = first_kept["content"]
        rest = [{"type": "text", "text": content}] if isinstance(content, str) else list(content)
        # tool_result blocks must lead a user message, but a valid cut never starts with one.
        return {"role": "user", "content": [block, *rest]}
    return {"role": "user", "content": [block]}

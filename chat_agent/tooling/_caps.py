"""The one cap on what a tool call leaves behind: the model's content, the UI's output, an error's
text and a progress line. Every tool (built in, LangChain, MCP) passes through the registry, and
the registry applies these after the tool, so no tool can store more than the cap, whatever it
forgets to bound itself. What is cut says so, with a marker the user and the model can see."""

from __future__ import annotations

import json
from typing import Any

STATUS_CHARS = 200  # one progress line (`tool_progress.status`)
MAX_IMAGES = 20  # image blocks in one result; each is already bounded by its source
MAX_IMAGE_BYTES = 7 * 1024 * 1024  # base64 of a 5 MB image, the Messages API's own limit
_SHRINK = (8, 32, 128, 512)  # fractions of the cap tried for each string of a structured output
_LIST_ITEMS = 200  # items kept of a list in a structured output once it must shrink


def cut_marker(kept: int, total: int) -> str:
    return f"\n\n[Output truncated: showing the first {kept} of {total} characters.]"


def cap_text(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    note = cut_marker(0, len(text))
    keep = max(limit - len(note) - 10, limit // 2)
    return text[:keep] + cut_marker(keep, len(text))


def cap_status(status: str) -> str:
    status = " ".join(str(status).split())  # one line
    return status if len(status) <= STATUS_CHARS else status[:STATUS_CHARS - 1] + "…"


def cap_content(content: str | list[dict], limit: int) -> str | list[dict]:
    """The model's `tool_result` content: text within `limit` characters in all, at most
    MAX_IMAGES images of at most MAX_IMAGE_BYTES; what is dropped is named in a text block."""
    if isinstance(content, str):
        return cap_text(content, limit)
    budget, capped, dropped_text, dropped_images = limit, [], 0, 0
    for block in content:
        if block.get("type") == "text" and isinstance(block.get("text"), str):
            if budget <= 0:
                dropped_text += len(block["text"])
                continue
            text = cap_text(block["text"], budget)
            budget -= len(text)
            block = {**block, "text": text}
        elif block.get("type") == "image":
            if dropped_images or sum(b.get("type") == "image" for b in capped) >= MAX_IMAGES or _too_big(block):
                dropped_images += 1
                continue
        elif len(json.dumps(block, default=str)) > max(budget, 0):
            dropped_text += len(json.dumps(block, default=str))
            continue
        else:
            budget -= len(json.dumps(block, default=str))
        capped.append(block)
    notes = []
    if dropped_text:
        notes.append(f"{dropped_text} more characters")
    if dropped_images:
        notes.append(f"{dropped_images} image{'' if dropped_images == 1 else 's'} (over {MAX_IMAGES} or too large)")
    if notes:
        capped.append({"type": "text", "text": f"[Output truncated: {' and '.join(notes)} not shown.]"})
    return capped


def _too_big(block: dict) -> bool:
    source = block.get("source")
    data = source.get("data") if isinstance(source, dict) else None
    return isinstance(data, str) and len(data) > MAX_IMAGE_BYTES


def cap_output(value: Any, limit: int) -> Any:
    """The UI's `tool_end.output` (stored with the message): a JSON value whose serialized form
    stays within `limit` characters. Long strings and lists shrink first, so its shape (a UI reads
    fields such as `files`) survives; failing that it becomes the cut JSON text."""
    if _size(value) <= limit:
        return value
    for fraction in _SHRINK:
        shrunk = _shrink(value, max(limit // fraction, 64))
        if _size(shrunk) <= limit:
            return shrunk
    return cap_text(json.dumps(value, ensure_ascii=False, default=str), limit)


def _size(value: Any) -> int:
    if isinstance(value, str):
        return len(value)
    return len(json.dumps(value, ensure_ascii=False, default=str))


def _shrink(value: Any, chars: int) -> Any:
    if isinstance(value, str):
        return cap_text(value, chars) if len(value) > chars else value
    if isinstance(value, list):
        kept = [_shrink(v, chars) for v in value[:_LIST_ITEMS]]
        if len(value) > _LIST_ITEMS:
            kept.append(f"[Output truncated: {len(value) - _LIST_ITEMS} more items not shown.]")
        return kept
    if isinstance(value, dict):
        return {k: _shrink(v, chars) for k, v in value.items()}
    return value

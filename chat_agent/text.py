"""Small text helpers the tools and messages share, and the one rule for text that cannot be
stored: a lone UTF-16 surrogate (JSON lets `\\ud800` through; UTF-8, SQLite and the model API
do not)."""

from __future__ import annotations

import re
from typing import Any

_SURROGATE = re.compile("[\ud800-\udfff]")  # in a Python str any surrogate is a lone one
REPLACEMENT = "\ufffd"


def shorten(text: str, limit: int) -> str:
    """At most `limit` characters, with an ellipsis where it was cut."""
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def one_line(text: str) -> str:
    """Every run of whitespace, newlines included, as one space."""
    return " ".join(text.split())


def encodable(text: str) -> bool:
    """Whether `text` can be written as UTF-8 (it holds no lone surrogate)."""
    return text.isascii() or _SURROGATE.search(text) is None


def scrub(text: str) -> str:
    """`text` with every lone surrogate replaced by U+FFFD, so it can be stored and sent."""
    return text if encodable(text) else _SURROGATE.sub(REPLACEMENT, text)


def scrub_json(value: Any) -> Any:
    """`scrub` applied to every string (keys too) of a JSON-like value; the value itself when
    there is nothing to repair, so the common case copies nothing."""
    if isinstance(value, str):
        return scrub(value)
    if all_encodable(value):
        return value
    if isinstance(value, dict):
        return {scrub_json(k): scrub_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [scrub_json(v) for v in value]
    return value


def all_encodable(value: Any) -> bool:
    """Whether every string in a JSON-like value (keys too) can be written as UTF-8. Walks
    with its own stack: a client's deeply nested JSON must not exhaust Python's."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if not encodable(item):
                return False
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return True

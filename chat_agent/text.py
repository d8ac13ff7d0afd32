"""Small text helpers the tools and messages share."""

from __future__ import annotations


def shorten(text: str, limit: int) -> str:
    """At most `limit` characters, with an ellipsis where it was cut."""
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def one_line(text: str) -> str:
    """Every run of whitespace, newlines included, as one space."""
    return " ".join(text.split())

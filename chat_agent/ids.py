"""The one way ids are made: random hex, with a prefix that says what the id names."""

from __future__ import annotations

import secrets


def new_id(prefix: str | None = None, *, hex_chars: int = 20) -> str:
    """`new_id("msg")` -> "msg_3f9c…" (20 hex characters: 80 random bits); no prefix, bare hex.
    Ids go into URLs and file keys, so they are never derived from anything a client sent."""
    token = secrets.token_hex((hex_chars + 1) // 2)[:hex_chars]
    return f"{prefix}_{token}" if prefix else token

"""The one way ids are made: random hex, with a prefix that says what the id names."""

from __future__ import annotations

import secrets
from contextvars import ContextVar
from typing import Callable

# Where an id's random hex comes from: n bytes -> 2n hex characters. A deterministic
# simulation (tests/sim) sets a seeded source here for the tasks it runs, so that a run is a
# function of its seed; nothing else sets it.
hex_source: ContextVar[Callable[[int], str]] = ContextVar("hex_source", default=secrets.token_hex)


def new_id(prefix: str | None = None, *, hex_chars: int = 20) -> str:
    """`new_id("msg")` -> "msg_3f9c…" (20 hex characters: 80 random bits); no prefix, bare hex.
    Ids go into URLs and file keys, so they are never derived from anything a client sent."""
    token = hex_source.get()((hex_chars + 1) // 2)[:hex_chars]
    return f"{prefix}_{token}" if prefix else token

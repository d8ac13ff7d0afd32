"""Reads one string field out of a tool call's JSON input while the model is still writing it,
so the artifact's text can stream to the canvas before the call is complete.

Re-parsing the whole growing buffer on every piece would cost O(n²) for a long artifact, so
once the field's string has begun, only the new bytes are decoded.
"""

from __future__ import annotations

import json
import re

import jiter

from chat_agent.text import scrub

_HIGH_SURROGATE = re.compile(r"\\u[dD][89abAB][0-9a-fA-F]{2}")
_LOW_SURROGATE = re.compile(r"\\u[dD][c-fC-F][0-9a-fA-F]{2}")
_LOW_BEGUN = re.compile(r"(\\(u([dD]([c-fC-F][0-9a-fA-F]{0,2})?)?)?)?")  # what may still become one


def _safe_end(raw: str) -> tuple[int, bool]:
    """How much of `raw` (the inside of a JSON string, as written so far) can be decoded now,
    and whether the string's closing quote is in it."""
    i, n = 0, len(raw)
    while i < n:
        c = raw[i]
        if c == '"':
            return i, True
        if c == "\\":
            width = 6 if raw.startswith("u", i + 1) else 2
            if width == 6 and _HIGH_SURROGATE.match(raw, i):
                # A surrogate pair is decoded whole, never one half alone; a high half with
                # no low one after it is decoded alone (and repaired by the caller).
                after = raw[i + 6:i + 12]
                if _LOW_SURROGATE.match(after):
                    width = 12
                elif len(after) < 6 and _LOW_BEGUN.fullmatch(after):
                    return i, False  # its low half may be on its way
            if i + width > n:
                return i, False  # an escape cut in half: wait for the rest
            i += width
            continue
        i += 1
    return n, False


class FieldStream:
    """Feed it the `input_json_delta` pieces of one tool_use block; it returns the text of
    `field` that is new since the last call."""

    def __init__(self, field: str):
        self.field = field
        self._raw = ""
        self._start: int | None = None  # where the field's string value begins in _raw
        self._done = False

    def feed(self, piece: str) -> str:
        if self._done:
            return ""
        self._raw += piece
        if self._start is None and not self._find_start():
            return ""
        end, closed = _safe_end(self._raw[self._start:])
        chunk = self._raw[self._start:self._start + end]
        self._raw = self._raw[self._start + end:]  # keep only what is not decoded yet
        self._start = 0
        self._done = closed
        # A lone `\ud800` the model wrote becomes U+FFFD, as it does in the stored input.
        return scrub(json.loads(f'"{chunk}"')) if chunk else ""

    def _find_start(self) -> bool:
        # Ask a real (partial) JSON parser whether the field has begun as a string; only then
        # look for where: the key as it is written, outside any string value before it.
        try:
            value = jiter.from_json(self._raw.encode(), partial_mode="trailing-strings")
        except ValueError:
            return False
        if not isinstance(value, dict) or not isinstance(value.get(self.field), str):
            return False
        match = re.search(r'(?<!\\)"' + re.escape(self.field) + r'"\s*:\s*"', self._raw)
        if match is None:
            return False
        self._start = match.end()
        return True

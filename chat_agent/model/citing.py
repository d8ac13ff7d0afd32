"""Citations of search results, the same whichever provider: the search results of a request
(`search_result` blocks in tool results) are numbered 1, 2, 3... by distinct source in the
order they appear, and a citation names its result by that number.

- Anthropic cites by itself: its `citations_delta` events name a result's source, which the
  number is looked up from.
- A Chat Completions model cannot: its request shows each result as text headed `[n]` and asks
  it to write `[n]` after what a result supports, and `MarkerScanner` turns those markers in
  the streamed text into the same citations.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from chat_agent.model.types import CitationDelta, TextDelta

HOW_TO_CITE = ("[Search results follow, each headed by its number. When you use one, cite it by writing its number "
               "in square brackets, like [1], right after the sentence it supports.]")
_MARKER = re.compile(r"\[(\d{1,4}(?:\s*,\s*\d{1,4})*)\]")
_OPEN_TAIL = re.compile(r"\[[\d,\s]{0,24}$")  # a marker that may go on in the next delta


def _results(messages: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for message in messages:
        content = message.get("content")
        if not isinstance(content, list):
            continue
        for block in content:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "search_result":
                yield block
            elif block.get("type") == "tool_result" and isinstance(block.get("content"), list):
                yield from (b for b in block["content"] if isinstance(b, dict) and b.get("type") == "search_result")


def search_sources(messages: list[dict[str, Any]]) -> list[str]:
    """The distinct sources of the request's search results, in order: source n is `[n + 1]`."""
    return list(dict.fromkeys(str(block.get("source", "")) for block in _results(messages)))


def _body(block: dict[str, Any]) -> str:
    return "\n".join(b.get("text", "") for b in block.get("content") or [] if isinstance(b, dict))


def numbered(messages: list[dict[str, Any]], numbers: dict[str, int] | None = None) -> list[dict[str, Any]]:
    """The messages with each search result as text headed by its number, and a line before a
    tool result's first one that says how to cite them: for a model without citations.
    `numbers`: each source's number, when the messages are part of a longer request."""
    if numbers is None:
        numbers = {source: n for n, source in enumerate(search_sources(messages), 1)}
    if not numbers:
        return messages

    def as_text(block: dict[str, Any]) -> dict[str, Any]:
        number = numbers[str(block.get("source", ""))]
        return {"type": "text", "text": f"[{number}] {block.get('title', '')}\n{_body(block)}"}

    def blocks(content: list[Any]) -> list[Any]:
        out: list[Any] = []
        told = False
        for block in content:
            if isinstance(block, dict) and block.get("type") == "search_result":
                if not told:
                    out.append({"type": "text", "text": HOW_TO_CITE})
                    told = True
                out.append(as_text(block))
            elif isinstance(block, dict) and block.get("type") == "tool_result" and isinstance(block.get("content"), list):
                out.append({**block, "content": blocks(block["content"])})
            else:
                out.append(block)
        return out

    return [{**m, "content": blocks(m["content"])} if isinstance(m.get("content"), list) else m for m in messages]


def result_text(messages: list[dict[str, Any]], source: str) -> str:
    """The text of the search result with this source (the last one, if it came twice)."""
    found = ""
    for block in _results(messages):
        if str(block.get("source", "")) == source:
            found = _body(block)
    return found


class MarkerScanner:
    """Finds `[n]` markers (and `[n, m]`) in text streamed piece by piece, once each, for the
    numbers of the request's search results; other brackets are left alone."""

    def __init__(self, messages: list[dict[str, Any]]) -> None:
        self._messages = messages
        self._found: list[str] | None = None
        self._text = ""
        self._done = 0  # characters of `_text` already scanned

    @property
    def _sources(self) -> list[str]:
        # Found when first needed: a reply that cites nothing does not read the whole history.
        if self._found is None:
            self._found = search_sources(self._messages)
        return self._found

    def feed(self, piece: str) -> list[CitationDelta]:
        return [item for item in self.split(piece) if isinstance(item, CitationDelta)]

    def split(self, piece: str) -> list[TextDelta | CitationDelta]:
        """The piece of text, cut after each marker it completes, with that marker's citations
        there: a citation follows exactly the text it was written after."""
        if not self._sources:
            return [TextDelta(piece)]
        start = len(self._text)
        self._text += piece
        items: list[TextDelta | CitationDelta] = []
        scanned, cut = self._done, start
        for match in _MARKER.finditer(self._text, self._done):
            scanned = match.end()
            found = [CitationDelta(n, self._sources[n - 1], result_text(self._messages, self._sources[n - 1]))
                     for n in (int(n) for n in match.group(1).split(",")) if 1 <= n <= len(self._sources)]
            if found:
                if match.end() > cut:
                    items.append(TextDelta(self._text[cut:match.end()]))
                    cut = match.end()
                items += found
        if cut < len(self._text):
            items.append(TextDelta(self._text[cut:]))
        tail = _OPEN_TAIL.search(self._text, scanned)
        self._done = tail.start() if tail else len(self._text)
        return items

    def citation(self, source: str, cited_text: str) -> CitationDelta | None:
        """A citation the provider made itself, numbered; None for a source not in the request."""
        if source not in self._sources:
            return None
        return CitationDelta(self._sources.index(source) + 1, source, cited_text)

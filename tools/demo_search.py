"""Canned web results for the demo server (`python server.py --demo` without EXA_API_KEY):
`web_search` runs for real, with its progress and its card, on these few pages."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

SEARCH_SECONDS = 1.2  # long enough to see the card working


@dataclass(frozen=True, slots=True)
class CannedResult:
    """The fields of exa-py's Result that web_search reads."""

    title: str
    url: str
    published_date: str | None
    text: str


PAGES = (
    CannedResult("Writing with a canvas: drafts you can edit together", "https://example.com/demo/canvas-writing",
                 "2025-01-15", "A canvas keeps the draft beside the chat: the assistant writes, you select a "
                 "passage and ask for a change, and every change is a version you can go back to."),
    CannedResult("How to structure a clear document", "https://example.com/demo/clear-structure", "2024-11-02",
                 "Lead with the reader's question, keep one idea per paragraph, and end with the next step."),
    CannedResult("Editing in small steps", "https://example.com/demo/small-edits", "2024-09-20",
                 "Targeted edits keep the rest of a text stable, so reviewers see exactly what changed."),
)


class CannedSearch:
    """Answers every query with PAGES (this is a demo; the query still shows in the card)."""

    async def search(self, query: str) -> list[CannedResult]:
        await asyncio.sleep(SEARCH_SECONDS)
        return list(PAGES)

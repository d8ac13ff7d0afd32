"""What one turn may do with knowledge: search the collections its message named, and turn
the model's citations into `Citation`s, only of chunks the user owns."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from chat_agent.knowledge.records import Hit
from chat_agent.knowledge.service import Knowledge, chunk_of
from chat_agent.protocol import Citation
from chat_agent.text import shorten

QUOTE_CHARS = 500  # a citation's quote when the model did not say which words it used


@dataclass(slots=True)
class KnowledgeScope:
    knowledge: Knowledge
    owner: str
    collection_ids: Sequence[str] = ()
    _cache: dict[int, Hit | None] = field(default_factory=dict)

    async def search(self, query: str, limit: int) -> list[Hit]:
        hits = await self.knowledge.search(self.owner, self.collection_ids, query, limit)
        for hit in hits:
            self._cache[hit.chunk_id] = hit
        return hits

    async def cite(self, index: int, source: str, quote: str) -> Citation | None:
        """The citation of a search result by its source; None unless it is a chunk of the
        user's (a result of an earlier turn, from a collection not named now, still counts)."""
        chunk_id = chunk_of(source)
        if chunk_id is None:
            return None
        if chunk_id not in self._cache:
            self._cache[chunk_id] = await self.knowledge.chunk(self.owner, chunk_id)
        hit = self._cache[chunk_id]
        if hit is None:
            return None
        return Citation(index=index, document_id=hit.document_id, filename=hit.filename, page=hit.page,
                        quote=quote.strip() or shorten(hit.text, QUOTE_CHARS))

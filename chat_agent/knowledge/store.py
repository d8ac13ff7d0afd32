"""Where knowledge bases are kept: the store's own database (tables of the knowledge
migration), on a connection of their own so that indexing a long document never queues behind
a turn's writes. Two implementations of one interface: `SqliteKnowledge` (FTS5, sqlite-vec)
and `PostgresKnowledge` (tsvector + GIN, vectors in a plain column scored by the database).

Every read and write takes the caller's `owner` and answers as if another owner's rows did not
exist, like the store's. Ids of collections and documents are ours (`new_id`); chunk ids are
the database's integers.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Protocol

from chat_agent.knowledge.records import Chunk, Collection, Document, Hit, Status

MAX_QUERY_WORDS = 32
_WORD = re.compile(r"\w+", re.UNICODE)
# Words that say nothing of what is sought: ORed in, they would match most chunks, which costs
# time and ranks nothing (PostgreSQL's `english` configuration drops the same ones).
STOP_WORDS = frozenset("""a about above after again all am an and any are as at be because been before being
below between both but by can could did do does doing down during each few for from further had has have having
he her here hers him his how i if in into is it its itself just me more most my no nor not now of off on once
only or other our ours out over own same she should so some such than that the their theirs them then there
these they this those through to too under until up very was we were what when where which while who whom why
will with would you your yours""".split())


def query_words(query: str) -> list[str]:
    """The words of a query, lower-cased, each once, in order, stop words left out unless
    there is nothing else: what a full-text search ORs."""
    seen: dict[str, None] = {}
    for word in _WORD.findall(query.lower()):
        if len(word) > 1 or word.isdigit():
            seen.setdefault(word, None)
    words = [w for w in seen if w not in STOP_WORDS] or list(seen)
    return words[:MAX_QUERY_WORDS]


class KnowledgeStore(Protocol):
    kind: str

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    async def add_collection(self, collection: Collection) -> None: ...

    async def collections(self, owner: str) -> list[Collection]:
        """The owner's collections, oldest first, each with its number of documents."""

    async def collection(self, owner: str, collection_id: str) -> Collection | None: ...

    async def owned_collections(self, owner: str, ids: Sequence[str]) -> list[str]:
        """Those of `ids` that are the owner's collections."""

    async def delete_collection(self, owner: str, collection_id: str) -> bool:
        """Deletes it with its documents and their chunks; whether it was there."""

    async def add_document(self, document: Document) -> None: ...

    async def documents(self, owner: str, collection_id: str) -> list[Document]: ...

    async def document(self, owner: str, document_id: str) -> Document | None: ...

    async def delete_document(self, owner: str, collection_id: str, document_id: str) -> bool: ...

    async def finish_document(self, owner: str, document_id: str, chunks: Sequence[Chunk],
                              vectors: Sequence[Sequence[float]] | None, pages: int | None, now: float) -> bool:
        """In one transaction: the document's chunks (replacing any it had: indexing again is
        harmless) and `ready`. False when the document is gone (deleted while it was indexed)."""

    async def begin_indexing(self, owner: str, document_id: str) -> Document | None:
        """Counts a run of the indexing job; the document, while it still waits to be indexed."""

    async def fail_document(self, owner: str, document_id: str, error: str, now: float) -> None: ...

    async def search_text(self, owner: str, collection_ids: Sequence[str], query: str, limit: int) -> list[int]:
        """Chunk ids by full-text relevance, best first."""

    async def search_vector(self, owner: str, collection_ids: Sequence[str], vector: Sequence[float],
                            limit: int) -> list[int]:
        """Chunk ids by cosine similarity to `vector` (unit length), best first."""

    async def hits(self, owner: str, chunk_ids: Sequence[int]) -> list[Hit]:
        """The owner's chunks of these ids, in the order asked (others left out)."""

    async def status_counts(self, statuses: Sequence[Status]) -> int: ...

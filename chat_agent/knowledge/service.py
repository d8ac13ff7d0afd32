"""Knowledge bases as the rest of the server sees them: collections and documents for the HTTP
routes, the indexing job the queue runs, and the search the agent's tool makes.

A document is added from an upload the user owns and indexed by a background job of the
shared queue (`index` jobs; keyed by the document, so one job per document waits, and on
PostgreSQL one instance of however many runs it). The job parses the upload as attachments
are parsed (the same child process and limits), chunks it, embeds the chunks when an
embeddings model is configured, and stores them with `ready` in one transaction; any failure
leaves `failed` with a reason the user can read.

Search ranks chunks by full text, by vector when there are vectors, and fuses the two lists
by reciprocal rank (a chunk's score is the sum of 1 / (RRF_K + rank) over the lists).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Literal

from chat_agent import clock
from chat_agent.config import Settings
from chat_agent.files.attachments import DocumentLibrary
from chat_agent.files.catalog import Files
from chat_agent.files.documents import DocumentError
from chat_agent.files.sniff import FileError, IMAGE_TYPES
from chat_agent.ids import new_id
from chat_agent.knowledge.chunking import chunk_document
from chat_agent.knowledge.embeddings import Embedder, EmbeddingError
from chat_agent.knowledge.records import Collection, Document, Hit, KnowledgeError
from chat_agent.knowledge.store import KnowledgeStore, query_words
from chat_agent.store import Store
from chat_agent.store.pg_pool import side_pool_size

log = logging.getLogger(__name__)

INDEX = "index"  # the job kind
RRF_K = 60  # the usual constant of reciprocal rank fusion: ranks past the first few count little
CANDIDATES = 50  # chunks each ranking contributes to the fusion
MAX_NAME = 200
INDEX_PARSE_TIMEOUT = 120.0  # seconds the parser may take over one document
SOURCE_PREFIX = "knowledge:"

Mode = Literal["text", "vector", "hybrid"]
Defer = Callable[[str, str], Awaitable[None]]  # (owner, document id): queue its indexing


def source_of(hit: Hit) -> str:
    """What a search result is called in the model's request, and what its citations name."""
    return f"{SOURCE_PREFIX}{hit.document_id}:{hit.chunk_id}"


def chunk_of(source: str) -> int | None:
    """The chunk a search result's source names; None for anything else."""
    if not source.startswith(SOURCE_PREFIX):
        return None
    tail = source.rpartition(":")[2]
    return int(tail) if tail.isdigit() else None


def fuse(rankings: Sequence[Sequence[int]], k: int = RRF_K) -> list[int]:
    scores: dict[int, float] = {}
    for ranking in rankings:
        for rank, chunk_id in enumerate(ranking, 1):
            scores[chunk_id] = scores.get(chunk_id, 0.0) + 1.0 / (k + rank)
    return sorted(scores, key=lambda c: (-scores[c], c))


class Knowledge:
    def __init__(self, store: KnowledgeStore, files: Files, documents: DocumentLibrary,
                 embedder: Embedder | None = None) -> None:
        self.store = store
        self._files = files
        self._documents = documents
        self.embedder = embedder
        self._defer: Defer | None = None

    async def start(self) -> None:
        await self.store.start()

    async def close(self) -> None:
        await self.store.close()
        if self.embedder is not None:
            await self.embedder.close()

    def use_queue(self, defer: Defer) -> None:
        """How indexing is queued (the hub's job queue, which calls `index` when it is due)."""
        self._defer = defer

    # ---- collections ----

    async def create_collection(self, owner: str, name: object) -> Collection:
        if not isinstance(name, str) or not name.strip():
            raise KnowledgeError(400, "A collection needs a `name` (a non-empty string).")
        if len(name.strip()) > MAX_NAME:
            raise KnowledgeError(400, f"A collection's name is at most {MAX_NAME} characters.")
        collection = Collection(new_id("kb"), owner, name.strip(), clock.now())
        await self.store.add_collection(collection)
        return collection

    async def collections(self, owner: str) -> list[Collection]:
        return await self.store.collections(owner)

    async def delete_collection(self, owner: str, collection_id: str) -> None:
        if not await self.store.delete_collection(owner, collection_id):
            raise KnowledgeError(404, "No such collection.")

    async def owned(self, owner: str, collection_ids: Sequence[str]) -> list[str]:
        """`collection_ids` if all are the owner's; KnowledgeError(404) naming one that is not."""
        ids = list(dict.fromkeys(collection_ids))
        found = set(await self.store.owned_collections(owner, ids))
        missing = [i for i in ids if i not in found]
        if missing:
            raise KnowledgeError(404, f"No collection {missing[0]!r}.")
        return ids

    # ---- documents ----

    async def add_document(self, owner: str, collection_id: str, upload_id: object) -> Document:
        if not isinstance(upload_id, str) or not upload_id:
            raise KnowledgeError(400, "A document needs an `uploadId` (from POST /api/uploads).")
        if await self.store.collection(owner, collection_id) is None:
            raise KnowledgeError(404, "No such collection.")
        file = await self._files.get(owner, upload_id)
        if file is None:
            raise KnowledgeError(404, "No such upload.")
        if file.media_type in IMAGE_TYPES:
            raise KnowledgeError(415, f"{file.filename} is an image; a knowledge base holds documents "
                                      "(PDF, DOCX, TXT, MD, CSV, HTML).")
        document = Document(new_id("kdoc"), collection_id, owner, file.id, file.filename, file.media_type,
                            "indexing", clock.now())
        await self.store.add_document(document)
        if self._defer is None:
            raise RuntimeError("knowledge bases were not given a job queue")
        await self._defer(owner, document.id)
        return document

    async def documents(self, owner: str, collection_id: str) -> list[Document]:
        if await self.store.collection(owner, collection_id) is None:
            raise KnowledgeError(404, "No such collection.")
        return await self.store.documents(owner, collection_id)

    async def delete_document(self, owner: str, collection_id: str, document_id: str) -> None:
        if not await self.store.delete_document(owner, collection_id, document_id):
            raise KnowledgeError(404, "No such document in this collection.")

    async def index(self, owner: str, document_id: str) -> None:
        """The indexing job: parse, chunk, embed, store; `failed` with the reason otherwise."""
        document = await self.store.begin_indexing(owner, document_id)
        if document is None:
            return  # deleted meanwhile, or indexed already (a job run again after its instance stopped)
        try:
            file, data = await self._files.read(owner, document.file_id)
            parsed = await self._documents.parse(data, file.media_type, file.filename)
            chunks = chunk_document(parsed)
            if not chunks:
                raise DocumentError(f"{file.filename} holds no text to search.")
            vectors = None
            if self.embedder is not None:
                vectors = await self.embedder.embed([f"{c.heading}\n{c.text}" if c.heading else c.text
                                                     for c in chunks])
            pages = len(parsed.parts) if parsed.unit == "page" else None
            stored = await self.store.finish_document(owner, document_id, chunks, vectors, pages, clock.now())
            log.info("indexed %s (%s): %d chunks%s", document_id, file.filename, len(chunks),
                     "" if stored else "; it was deleted meanwhile")
        except (DocumentError, EmbeddingError) as exc:
            await self.store.fail_document(owner, document_id, str(exc), clock.now())
        except FileError as exc:
            await self.store.fail_document(owner, document_id, exc.message, clock.now())
        except Exception as exc:
            log.exception("indexing %s failed", document_id)
            await self.store.fail_document(owner, document_id, f"Indexing failed on the server ({type(exc).__name__}).",
                                           clock.now())

    # ---- search ----

    async def search(self, owner: str, collection_ids: Sequence[str], query: str, limit: int = 5,
                     mode: Mode = "hybrid") -> list[Hit]:
        """The best `limit` chunks of the owner's collections for `query`."""
        if not collection_ids or not query_words(query):
            return []
        searches = []
        if mode in ("text", "hybrid"):
            searches.append(self.store.search_text(owner, collection_ids, query, CANDIDATES))
        if mode in ("vector", "hybrid") and self.embedder is not None:
            searches.append(self._nearest(owner, collection_ids, query))
        rankings = await asyncio.gather(*searches)  # the query is embedded while the text is searched
        return await self.store.hits(owner, fuse(rankings)[:limit])

    async def _nearest(self, owner: str, collection_ids: Sequence[str], query: str) -> list[int]:
        assert self.embedder is not None
        try:
            vector = (await self.embedder.embed([query]))[0]
        except EmbeddingError as exc:  # the search goes on with full text alone
            log.warning("knowledge search without vectors: %s", exc)
            return []
        return await self.store.search_vector(owner, collection_ids, vector, CANDIDATES)

    async def chunk(self, owner: str, chunk_id: int) -> Hit | None:
        """The owner's chunk of that id (what a citation points at); None for any other."""
        found = await self.store.hits(owner, [chunk_id])
        return found[0] if found else None


def create_knowledge(settings: Settings, store: Store, files: Files) -> Knowledge | None:
    """Knowledge bases in the store's database; None for an in-memory store (no other
    connection can see its tables)."""
    embedder = None
    if settings.embeddings_model:
        base = settings.embeddings_base_url or settings.openai_base_url or "https://api.openai.com/v1"
        embedder = Embedder(settings.embeddings_model, base, settings.embeddings_api_key or settings.openai_api_key)
    if store.kind == "postgresql":
        from chat_agent.knowledge.pg_store import PostgresKnowledge
        backend: KnowledgeStore = PostgresKnowledge(store.url, side_pool_size(store.pool_size))  # type: ignore[attr-defined]
    else:
        path = getattr(store, "path", None)
        if store.kind != "sqlite" or path is None or str(path) == ":memory:":
            return None
        from chat_agent.knowledge.sqlite_store import SqliteKnowledge
        backend = SqliteKnowledge(path)
    # A document indexed in the background may be long: more time to parse than an attachment's.
    return Knowledge(backend, files, DocumentLibrary(files, timeout=INDEX_PARSE_TIMEOUT), embedder)

"""Knowledge bases in the SQLite file, on a connection of their own (one thread, like the
quota counters'); WAL lets it read beside the store's. The standard library's sqlite3 module,
as the store's: a second copy of SQLite in the process (APSW's, say) would break the file
locks the two share, which corrupts a WAL database.

Vectors are in sqlite-vec `vec0` tables, `knowledge_vec_{dimensions}` (an embeddings model
has one size; another model makes another table), keyed by chunk id and partitioned by
collection, so a search reads only the collections it names. Deleting chunks deletes their
vectors in the same transaction. A Python whose sqlite3 cannot load extensions (built without
`--enable-loadable-sqlite-extensions`, as pyenv builds it by default) keeps them in the
`knowledge_vectors` table instead, with their signs as bits, scored by functions of ours: the
Hamming distance of the bits picks `RESCORED` candidates, their exact dot product ranks them
(binary quantization with rescoring, as on PostgreSQL); slower, and the log says so."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, TypeVar

import logging
import operator
import sqlite3
import struct

import sqlite_vec

from chat_agent.knowledge.records import Chunk, Collection, Document, Hit, Status
from chat_agent.knowledge.store import query_words

T = TypeVar("T")
log = logging.getLogger(__name__)
RESCORED = 100  # candidates of the bit distance that the exact score ranks (without sqlite-vec)

_DOCUMENT = ("SELECT id, collection_id, owner, file_id, filename, media_type, status, created_at, error, pages,"
             " chunks, indexed_at, runs FROM knowledge_documents")
# The vec0 tables themselves, not their shadow tables (`knowledge_vec_384_chunks`...).
_VEC_TABLES = ("SELECT name FROM sqlite_master WHERE type = 'table' AND name GLOB 'knowledge_vec_[0-9]*'"
               " AND sql LIKE 'CREATE VIRTUAL TABLE%'")
_HIT = ("SELECT c.id, c.document_id, c.collection_id, d.filename, c.page, c.heading, c.text"
        " FROM knowledge_chunks c JOIN knowledge_documents d ON d.id = c.document_id"
        " WHERE c.owner = ? AND c.id IN ({ids})")


class _Dot:
    """`knowledge_dot(row, query)`: the dot product of two float32 vectors (unit length: their
    cosine). A search passes one query for every row: it is unpacked once."""

    def __init__(self) -> None:
        self._query: tuple[bytes, tuple[float, ...]] = (b"", ())

    def __call__(self, row: bytes, query: bytes) -> float:
        if query != self._query[0]:
            self._query = (query, struct.unpack(f"{len(query) // 4}f", query))
        return sum(map(operator.mul, struct.unpack(f"{len(row) // 4}f", row), self._query[1]))


class _Hamming:
    """`knowledge_hamming(row_bits, query_bits)`: how many signs differ (the query's unpacked once)."""

    def __init__(self) -> None:
        self._query: tuple[bytes, int] = (b"", 0)

    def __call__(self, row: bytes, query: bytes) -> int:
        if query != self._query[0]:
            self._query = (query, int.from_bytes(query, "little"))
        return (int.from_bytes(row, "little") ^ self._query[1]).bit_count()


def _bits(vector: Sequence[float]) -> bytes:
    """The signs of a vector's components, one bit each."""
    return sum(1 << i for i, x in enumerate(vector) if x > 0).to_bytes((len(vector) + 7) // 8, "little")


def _marks(values: Sequence[Any]) -> str:
    return ", ".join("?" * len(values))


def _document(row: Sequence[Any]) -> Document:
    return Document(*row)


class SqliteKnowledge:
    kind = "sqlite"

    def __init__(self, path: Path) -> None:
        self.path = path
        self._db: sqlite3.Connection | None = None
        self.vec = False  # sqlite-vec loaded: vectors in vec0 tables
        self._thread: ThreadPoolExecutor | None = None

    async def start(self) -> None:
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="knowledge")

        def connect() -> sqlite3.Connection:
            db = sqlite3.connect(self.path, timeout=5.0, isolation_level=None, check_same_thread=False)
            db.execute("PRAGMA foreign_keys = ON")
            if hasattr(db, "enable_load_extension"):
                try:
                    db.enable_load_extension(True)
                    sqlite_vec.load(db)
                    db.enable_load_extension(False)
                    self.vec = True
                except sqlite3.Error as exc:
                    log.warning("sqlite-vec could not be loaded (%s): vectors are scored without it, slowly", exc)
            else:
                log.warning("this Python's sqlite3 cannot load extensions: knowledge vectors are scored without "
                            "sqlite-vec, slowly (build Python with --enable-loadable-sqlite-extensions)")
            db.create_function("knowledge_dot", 2, _Dot(), deterministic=True)
            db.create_function("knowledge_hamming", 2, _Hamming(), deterministic=True)
            return db
        self._db = await self._run(connect)

    async def close(self) -> None:
        if self._db is not None:
            db, self._db = self._db, None
            await self._run(db.close)
        if self._thread is not None:
            self._thread.shutdown(wait=True)
            self._thread = None

    @contextmanager
    def _writing(self) -> Iterator[None]:
        """A write transaction that takes the write lock first (BEGIN IMMEDIATE): one that read
        first and then wrote would fail at once, without waiting, had the store's connection
        committed in between (SQLITE_BUSY_SNAPSHOT in WAL mode)."""
        assert self._db is not None
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    async def _run(self, job: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._thread, job)

    def _rows(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        assert self._db is not None
        return self._db.execute(sql, tuple(args)).fetchall()

    async def _query(self, sql: str, *args: Any) -> list[tuple[Any, ...]]:
        return await self._run(lambda: self._rows(sql, args))

    async def add_collection(self, collection: Collection) -> None:
        await self._query("INSERT INTO knowledge_collections (id, owner, name, created_at) VALUES (?, ?, ?, ?)",
                          collection.id, collection.owner, collection.name, collection.created_at)

    async def collections(self, owner: str) -> list[Collection]:
        rows = await self._query(
            "SELECT k.id, k.owner, k.name, k.created_at,"
            " (SELECT COUNT(*) FROM knowledge_documents d WHERE d.collection_id = k.id)"
            " FROM knowledge_collections k WHERE k.owner = ? ORDER BY k.created_at, k.id", owner)
        return [Collection(*row) for row in rows]

    async def collection(self, owner: str, collection_id: str) -> Collection | None:
        return next((c for c in await self.collections(owner) if c.id == collection_id), None)

    async def owned_collections(self, owner: str, ids: Sequence[str]) -> list[str]:
        if not ids:
            return []
        rows = await self._query(f"SELECT id FROM knowledge_collections WHERE owner = ? AND id IN ({_marks(ids)})",
                                 owner, *ids)
        return [row[0] for row in rows]

    async def delete_collection(self, owner: str, collection_id: str) -> bool:
        def job() -> bool:
            assert self._db is not None
            with self._writing():
                found = self._rows("SELECT 1 FROM knowledge_collections WHERE owner = ? AND id = ?",
                                   (owner, collection_id))
                # The chunks first, by their own index: the cascade would find them one document at a time.
                self._drop_vectors("SELECT id FROM knowledge_chunks WHERE owner = ? AND collection_id = ?",
                                   (owner, collection_id))
                self._rows("DELETE FROM knowledge_chunks WHERE owner = ? AND collection_id = ?", (owner, collection_id))
                self._rows("DELETE FROM knowledge_collections WHERE owner = ? AND id = ?", (owner, collection_id))
            return bool(found)
        return await self._run(job)

    async def add_document(self, document: Document) -> None:
        d = document
        await self._query(
            "INSERT INTO knowledge_documents (id, collection_id, owner, file_id, filename, media_type, status,"
            " created_at, error, pages, chunks, indexed_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            d.id, d.collection_id, d.owner, d.file_id, d.filename, d.media_type, d.status, d.created_at, d.error,
            d.pages, d.chunks, d.indexed_at)

    async def documents(self, owner: str, collection_id: str) -> list[Document]:
        rows = await self._query(f"{_DOCUMENT} WHERE owner = ? AND collection_id = ? ORDER BY created_at, id",
                                 owner, collection_id)
        return [_document(row) for row in rows]

    async def document(self, owner: str, document_id: str) -> Document | None:
        rows = await self._query(f"{_DOCUMENT} WHERE owner = ? AND id = ?", owner, document_id)
        return _document(rows[0]) if rows else None

    async def delete_document(self, owner: str, collection_id: str, document_id: str) -> bool:
        def job() -> bool:
            assert self._db is not None
            with self._writing():
                found = self._rows("SELECT 1 FROM knowledge_documents WHERE owner = ? AND collection_id = ? AND id = ?",
                                   (owner, collection_id, document_id))
                if found:
                    self._drop_vectors("SELECT id FROM knowledge_chunks WHERE document_id = ?", (document_id,))
                self._rows("DELETE FROM knowledge_documents WHERE owner = ? AND collection_id = ? AND id = ?",
                           (owner, collection_id, document_id))
            return bool(found)
        return await self._run(job)

    async def finish_document(self, owner: str, document_id: str, chunks: Sequence[Chunk],
                              vectors: Sequence[Sequence[float]] | None, pages: int | None, now: float) -> bool:
        def job() -> bool:
            assert self._db is not None
            with self._writing():
                found = self._rows("SELECT collection_id FROM knowledge_documents WHERE owner = ? AND id = ?",
                                   (owner, document_id))
                if not found:
                    return False
                collection_id = found[0][0]
                self._drop_vectors("SELECT id FROM knowledge_chunks WHERE document_id = ?", (document_id,))
                self._rows("DELETE FROM knowledge_chunks WHERE document_id = ?", (document_id,))
                ids = [self._rows("INSERT INTO knowledge_chunks (document_id, collection_id, owner, ord, page, heading,"
                                  " text) VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING id",
                                  (document_id, collection_id, owner, c.ord, c.page, c.heading, c.text))[0][0]
                       for c in chunks]
                if vectors:
                    if self.vec:
                        self._db.executemany(
                            f"INSERT INTO {self._vector_table(len(vectors[0]))} (rowid, collection_id, embedding)"
                            " VALUES (?, ?, ?)", [(chunk_id, collection_id, sqlite_vec.serialize_float32(list(vector)))
                                                  for chunk_id, vector in zip(ids, vectors)])
                    else:
                        self._db.executemany(
                            "INSERT INTO knowledge_vectors (chunk_id, collection_id, embedding, bits)"
                            " VALUES (?, ?, ?, ?)",
                            [(chunk_id, collection_id, sqlite_vec.serialize_float32(list(vector)), _bits(vector))
                             for chunk_id, vector in zip(ids, vectors)])
                self._rows("UPDATE knowledge_documents SET status = 'ready', error = NULL, pages = ?, chunks = ?,"
                           " indexed_at = ? WHERE id = ?", (pages, len(chunks), now, document_id))
            return True
        return await self._run(job)

    async def begin_indexing(self, owner: str, document_id: str) -> Document | None:
        await self._query("UPDATE knowledge_documents SET runs = runs + 1 WHERE owner = ? AND id = ?",
                          owner, document_id)
        document = await self.document(owner, document_id)
        return document if document is not None and document.status == "indexing" else None

    async def fail_document(self, owner: str, document_id: str, error: str, now: float) -> None:
        await self._query("UPDATE knowledge_documents SET status = 'failed', error = ?, indexed_at = ?"
                          " WHERE owner = ? AND id = ?", error, now, owner, document_id)

    async def search_text(self, owner: str, collection_ids: Sequence[str], query: str, limit: int) -> list[int]:
        words = query_words(query)
        if not words or not collection_ids:
            return []
        match = " OR ".join(f'"{w}"' for w in words)
        rows = await self._query(
            "SELECT c.id FROM knowledge_fts f JOIN knowledge_chunks c ON c.id = f.rowid"
            f" WHERE knowledge_fts MATCH ? AND c.owner = ? AND c.collection_id IN ({_marks(collection_ids)})"
            " ORDER BY bm25(knowledge_fts, 2.0, 1.0) LIMIT ?", match, owner, *collection_ids, limit)
        return [row[0] for row in rows]

    async def search_vector(self, owner: str, collection_ids: Sequence[str], vector: Sequence[float],
                            limit: int) -> list[int]:
        def job() -> list[int]:
            table = f"knowledge_vec_{len(vector)}"
            query = sqlite_vec.serialize_float32(list(vector))
            if collection_ids and not self.vec:
                bits = _bits(vector)  # a vector of another size (another model's) has other bits
                best = [row[0] for row in self._rows(
                    "SELECT chunk_id FROM (SELECT chunk_id, embedding FROM knowledge_vectors"
                    f"  WHERE collection_id IN ({_marks(collection_ids)}) AND length(bits) = ?"
                    "  ORDER BY knowledge_hamming(bits, ?) LIMIT ?)"
                    " ORDER BY knowledge_dot(embedding, ?) DESC LIMIT ?",
                    (*collection_ids, len(bits), bits, max(limit, RESCORED), query, limit))]
                return self._owned(owner, best)
            if not collection_ids or not self._rows(f"{_VEC_TABLES} AND name = ?", (table,)):
                return []
            found: list[tuple[float, int]] = []
            for collection_id in dict.fromkeys(collection_ids):  # a KNN query reads one partition
                found += [(row[1], row[0]) for row in self._rows(
                    f"SELECT rowid, distance FROM {table} WHERE embedding MATCH ? AND k = ? AND collection_id = ?",
                    (query, limit, collection_id))]
            return self._owned(owner, [chunk_id for _, chunk_id in sorted(found)[:limit]])
        return await self._run(job)

    def _owned(self, owner: str, chunk_ids: list[int]) -> list[int]:
        """Those of the chunks that are the owner's, in order."""
        if not chunk_ids:
            return []
        mine = {row[0] for row in self._rows(
            f"SELECT id FROM knowledge_chunks WHERE owner = ? AND id IN ({_marks(chunk_ids)})", (owner, *chunk_ids))}
        return [chunk_id for chunk_id in chunk_ids if chunk_id in mine]

    def _vector_table(self, dimensions: int) -> str:
        table = f"knowledge_vec_{int(dimensions)}"
        self._rows(f"CREATE VIRTUAL TABLE IF NOT EXISTS {table} USING vec0(collection_id TEXT PARTITION KEY,"
                   f" embedding FLOAT[{int(dimensions)}] distance_metric=cosine)")
        return table

    def _drop_vectors(self, chunks: str, args: Sequence[Any]) -> None:
        """Deletes the vectors of the chunks `chunks` selects, from every vector table (those of
        `knowledge_vectors` go with their chunks, by its foreign key)."""
        if not self.vec:
            return
        for (table,) in self._rows(_VEC_TABLES):
            self._rows(f"DELETE FROM {table} WHERE rowid IN ({chunks})", args)

    async def hits(self, owner: str, chunk_ids: Sequence[int]) -> list[Hit]:
        if not chunk_ids:
            return []
        rows = await self._query(_HIT.format(ids=_marks(chunk_ids)), owner, *chunk_ids)
        found = {row[0]: Hit(*row) for row in rows}
        return [found[i] for i in chunk_ids if i in found]

    async def status_counts(self, statuses: Sequence[Status]) -> int:
        rows = await self._query(f"SELECT COUNT(*) FROM knowledge_documents WHERE status IN ({_marks(statuses)})",
                                 *statuses)
        return int(rows[0][0])

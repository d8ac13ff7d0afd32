"""Knowledge bases in PostgreSQL, on a small pool of their own. Full text is the generated
`tsv` column under its GIN index.

Vectors go in pgvector when the server has it (installed, or available and ours to create):
one table per embedding size, `knowledge_pgvec_{dimensions}`, keyed by chunk id (deleting a
chunk deletes its vector) and searched exactly by inner product over the caller's own rows.
An approximate index (HNSW) is left out on purpose: its candidates are taken before the
owner/collection filter, so a user's small collection among many others' would come back short.

Without pgvector nothing else is needed: a plain REAL[] (unit length) and its signs as a bit
string. A vector search takes the `RESCORED` chunks nearest by Hamming distance of the bits
(`bit_count` of an XOR: native, a few bytes a row), then ranks those by their exact dot
product (over unnest, which would be slow over every row): binary quantization with
rescoring, all in one statement."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import logging

from psycopg import AsyncConnection, errors
from psycopg_pool import AsyncConnectionPool

from chat_agent.knowledge.records import Chunk, Collection, Document, Hit, Status
from chat_agent.knowledge.store import query_words
from chat_agent.store.pg_pool import SIDE_POOL, borrow

log = logging.getLogger(__name__)
RESCORED = 100  # candidates of the bit distance that the exact score ranks

_DOCUMENT = ("SELECT id, collection_id, owner, file_id, filename, media_type, status, created_at, error, pages,"
             " chunks, indexed_at, runs FROM knowledge_documents")


def _document(row: Sequence[Any]) -> Document:
    return Document(*row)


def _bits(vector: Sequence[float]) -> str:
    return "".join("1" if x > 0 else "0" for x in vector)


def _literal(vector: Sequence[float]) -> str:
    """pgvector's text form: `[0.1,0.2,...]` (repr keeps every digit of a float)."""
    return "[" + ",".join(repr(float(x)) for x in vector) + "]"


def _pgvec_table(dimensions: int) -> str:
    return f"knowledge_pgvec_{int(dimensions)}"


class PostgresKnowledge:
    kind = "postgresql"

    def __init__(self, url: str, pool_size: int = SIDE_POOL) -> None:
        self.url = url
        self._pool_size = pool_size
        self._pool: AsyncConnectionPool[AsyncConnection[Any]] | None = None
        self.pgvector = False  # vectors in pgvector's tables, not in the REAL[] column
        self._pgvec_tables: set[str] = set()  # the ones known to exist

    async def start(self) -> None:
        self._pool = AsyncConnectionPool(self.url, min_size=1, max_size=self._pool_size, open=False,
                                         kwargs={"autocommit": True}, name="chat-agent-knowledge")
        await self._pool.open(wait=True, timeout=30)
        self.pgvector = await self._find_pgvector()

    async def _find_pgvector(self) -> bool:
        rows = await self._query("SELECT installed_version IS NOT NULL FROM pg_available_extensions"
                                 " WHERE name = 'vector'")
        if not rows:
            log.info("PostgreSQL has no pgvector: knowledge vectors are kept in a REAL[] column and scored there")
            return False
        if not rows[0][0]:
            try:
                await self._query("CREATE EXTENSION IF NOT EXISTS vector")
            except errors.InsufficientPrivilege as exc:
                log.warning("pgvector is available but this role cannot create it (%s): knowledge vectors"
                            " are scored without it; CREATE EXTENSION vector as a superuser to use it", exc)
                return False
            except (errors.UniqueViolation, errors.DuplicateObject):
                pass  # two instances creating it at once: the other one's is as good as ours
        return True

    async def _pgvec_exists(self, table: str) -> bool:
        """Whether this size has a table (made by any instance: once seen, it stays)."""
        if table not in self._pgvec_tables:
            rows = await self._query("SELECT to_regclass(%s) IS NOT NULL", table)
            if rows[0][0]:
                self._pgvec_tables.add(table)
        return table in self._pgvec_tables

    async def _pgvec_table_for(self, conn: AsyncConnection[Any], dimensions: int) -> str:
        table = _pgvec_table(dimensions)
        if table not in self._pgvec_tables:
            try:
                await conn.execute(
                    f"CREATE TABLE IF NOT EXISTS {table} ("
                    " chunk_id BIGINT PRIMARY KEY REFERENCES knowledge_chunks (id) ON DELETE CASCADE,"
                    " owner TEXT NOT NULL, collection_id TEXT NOT NULL,"
                    f" embedding vector({int(dimensions)}) NOT NULL)")
                await conn.execute(f"CREATE INDEX IF NOT EXISTS {table}_by_owner ON {table} (owner, collection_id)")
            except errors.UniqueViolation:
                pass  # another instance created it between our IF NOT EXISTS and its catalog row
            self._pgvec_tables.add(table)
        return table

    async def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()

    async def _query(self, sql: str, *args: Any) -> list[tuple[Any, ...]]:
        assert self._pool is not None
        async with borrow(self._pool) as conn:
            cursor = await conn.execute(sql, args)  # type: ignore[arg-type]
            return list(await cursor.fetchall()) if cursor.description is not None else []

    async def add_collection(self, collection: Collection) -> None:
        await self._query("INSERT INTO knowledge_collections (id, owner, name, created_at) VALUES (%s, %s, %s, %s)",
                          collection.id, collection.owner, collection.name, collection.created_at)

    async def collections(self, owner: str) -> list[Collection]:
        rows = await self._query(
            "SELECT k.id, k.owner, k.name, k.created_at,"
            " (SELECT COUNT(*) FROM knowledge_documents d WHERE d.collection_id = k.id)"
            " FROM knowledge_collections k WHERE k.owner = %s ORDER BY k.created_at, k.id", owner)
        return [Collection(*row) for row in rows]

    async def collection(self, owner: str, collection_id: str) -> Collection | None:
        return next((c for c in await self.collections(owner) if c.id == collection_id), None)

    async def owned_collections(self, owner: str, ids: Sequence[str]) -> list[str]:
        if not ids:
            return []
        rows = await self._query("SELECT id FROM knowledge_collections WHERE owner = %s AND id = ANY(%s)",
                                 owner, list(ids))
        return [row[0] for row in rows]

    async def delete_collection(self, owner: str, collection_id: str) -> bool:
        assert self._pool is not None
        async with borrow(self._pool) as conn, conn.transaction():
            await conn.execute("DELETE FROM knowledge_chunks WHERE owner = %s AND collection_id = %s",
                               (owner, collection_id))
            cursor = await conn.execute("DELETE FROM knowledge_collections WHERE owner = %s AND id = %s",
                                        (owner, collection_id))
            return cursor.rowcount > 0

    async def add_document(self, document: Document) -> None:
        d = document
        await self._query(
            "INSERT INTO knowledge_documents (id, collection_id, owner, file_id, filename, media_type, status,"
            " created_at, error, pages, chunks, indexed_at)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
            d.id, d.collection_id, d.owner, d.file_id, d.filename, d.media_type, d.status, d.created_at, d.error,
            d.pages, d.chunks, d.indexed_at)

    async def documents(self, owner: str, collection_id: str) -> list[Document]:
        rows = await self._query(f"{_DOCUMENT} WHERE owner = %s AND collection_id = %s ORDER BY created_at, id",
                                 owner, collection_id)
        return [_document(row) for row in rows]

    async def document(self, owner: str, document_id: str) -> Document | None:
        rows = await self._query(f"{_DOCUMENT} WHERE owner = %s AND id = %s", owner, document_id)
        return _document(rows[0]) if rows else None

    async def delete_document(self, owner: str, collection_id: str, document_id: str) -> bool:
        assert self._pool is not None
        async with borrow(self._pool) as conn:
            cursor = await conn.execute(
                "DELETE FROM knowledge_documents WHERE owner = %s AND collection_id = %s AND id = %s",
                (owner, collection_id, document_id))
            return cursor.rowcount > 0

    async def finish_document(self, owner: str, document_id: str, chunks: Sequence[Chunk],
                              vectors: Sequence[Sequence[float]] | None, pages: int | None, now: float) -> bool:
        assert self._pool is not None
        async with borrow(self._pool) as conn, conn.transaction():
            cursor = await conn.execute(
                "SELECT collection_id FROM knowledge_documents WHERE owner = %s AND id = %s FOR UPDATE",
                (owner, document_id))
            row = await cursor.fetchone()
            if row is None:
                return False
            await conn.execute("DELETE FROM knowledge_chunks WHERE document_id = %s", (document_id,))
            columns = bool(vectors) and not self.pgvector  # the fallback's REAL[] and bits
            async with conn.cursor() as cur:
                await cur.executemany(
                    "INSERT INTO knowledge_chunks (document_id, collection_id, owner, ord, page, heading, text,"
                    " embedding, embedding_bits) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, CAST(%s AS BIT VARYING))"
                    " RETURNING id",
                    [(document_id, row[0], owner, c.ord, c.page, c.heading, c.text,
                      [float(x) for x in vectors[i]] if vectors and columns else None,
                      _bits(vectors[i]) if vectors and columns else None)
                     for i, c in enumerate(chunks)], returning=bool(vectors) and self.pgvector)
                ids: list[int] = []
                if vectors and self.pgvector and chunks:
                    while True:
                        ids.append((await cur.fetchone())[0])  # type: ignore[index]
                        if not cur.nextset():
                            break
            if vectors and self.pgvector and chunks:
                table = await self._pgvec_table_for(conn, len(vectors[0]))
                async with conn.cursor() as cur:
                    await cur.executemany(
                        f"INSERT INTO {table} (chunk_id, owner, collection_id, embedding)"
                        " VALUES (%s, %s, %s, CAST(%s AS vector))",
                        [(chunk_id, owner, row[0], _literal(vector)) for chunk_id, vector in zip(ids, vectors)])
            await conn.execute("UPDATE knowledge_documents SET status = 'ready', error = NULL, pages = %s,"
                               " chunks = %s, indexed_at = %s WHERE id = %s", (pages, len(chunks), now, document_id))
            return True

    async def begin_indexing(self, owner: str, document_id: str) -> Document | None:
        await self._query("UPDATE knowledge_documents SET runs = runs + 1 WHERE owner = %s AND id = %s",
                          owner, document_id)
        document = await self.document(owner, document_id)
        return document if document is not None and document.status == "indexing" else None

    async def fail_document(self, owner: str, document_id: str, error: str, now: float) -> None:
        await self._query("UPDATE knowledge_documents SET status = 'failed', error = %s, indexed_at = %s"
                          " WHERE owner = %s AND id = %s", error, now, owner, document_id)

    async def search_text(self, owner: str, collection_ids: Sequence[str], query: str, limit: int) -> list[int]:
        words = query_words(query)
        if not words or not collection_ids:
            return []
        terms = " | ".join(f"'{w}'" for w in words)
        rows = await self._query(
            "SELECT c.id FROM knowledge_chunks c, to_tsquery('english', %s) q"
            " WHERE c.owner = %s AND c.collection_id = ANY(%s) AND c.tsv @@ q"
            " ORDER BY ts_rank(c.tsv, q) DESC, c.id LIMIT %s", terms, owner, list(collection_ids), limit)
        return [row[0] for row in rows]

    async def search_vector(self, owner: str, collection_ids: Sequence[str], vector: Sequence[float],
                            limit: int) -> list[int]:
        if not collection_ids:
            return []
        if self.pgvector:
            table = _pgvec_table(len(vector))
            if not await self._pgvec_exists(table):
                return []  # no vector of this size was ever stored
            rows = await self._query(
                f"SELECT chunk_id FROM {table} WHERE owner = %s AND collection_id = ANY(%s)"
                " ORDER BY embedding <#> CAST(%s AS vector), chunk_id LIMIT %s",
                owner, list(collection_ids), _literal(vector), limit)
            return [row[0] for row in rows]
        rows = await self._query(
            "SELECT c.id FROM (SELECT id, embedding FROM knowledge_chunks"
            "  WHERE owner = %s AND collection_id = ANY(%s) AND length(embedding_bits) = %s"
            "  ORDER BY bit_count(embedding_bits # CAST(%s AS BIT VARYING)), id LIMIT %s) c"
            " ORDER BY (SELECT SUM(a * b) FROM unnest(c.embedding, CAST(%s AS REAL[])) AS t(a, b)) DESC, c.id"
            " LIMIT %s", owner, list(collection_ids), len(vector), _bits(vector), max(limit, RESCORED),
            [float(x) for x in vector], limit)
        return [row[0] for row in rows]

    async def hits(self, owner: str, chunk_ids: Sequence[int]) -> list[Hit]:
        if not chunk_ids:
            return []
        rows = await self._query(
            "SELECT c.id, c.document_id, c.collection_id, d.filename, c.page, c.heading, c.text"
            " FROM knowledge_chunks c JOIN knowledge_documents d ON d.id = c.document_id"
            " WHERE c.owner = %s AND c.id = ANY(%s)", owner, list(chunk_ids))
        found = {row[0]: Hit(*row) for row in rows}
        return [found[i] for i in chunk_ids if i in found]

    async def status_counts(self, statuses: Sequence[Status]) -> int:
        rows = await self._query("SELECT COUNT(*) FROM knowledge_documents WHERE status = ANY(%s)", list(statuses))
        return int(rows[0][0])

"""Retrieval over the labelled set (tests/knowledge_set.py) on both stores: full text finds
most answers, the fake embeddings' vectors many, and fusing the two is at least as good as
either alone. And a search, or a citation, never reaches another user's chunks."""

from __future__ import annotations

import pytest

from chat_agent.knowledge.embeddings import Embedder
from chat_agent.knowledge.pg_store import PostgresKnowledge
from chat_agent.knowledge.scope import KnowledgeScope
from chat_agent.knowledge.service import Knowledge, source_of
from chat_agent.knowledge.sqlite_store import SqliteKnowledge
from tests.fakes.openai_fake import FakeOpenAI
from tests.knowledge_set import DOCUMENTS, QUESTIONS, index_set, recall


@pytest.fixture(scope="module")
def embeddings():
    with FakeOpenAI() as fake:
        yield fake


async def test_hybrid_recall_is_at_least_either_alone(backend, embeddings):
    assert len(DOCUMENTS) >= 20 and len(QUESTIONS) >= 50
    store = backend.new()
    await store.open()  # the schema
    place = SqliteKnowledge(backend.where) if backend.name == "sqlite" else PostgresKnowledge(str(backend.where))
    knowledge = Knowledge(place, None, None, Embedder("embed-test", embeddings.base_url, embeddings.api_key))
    await knowledge.start()
    try:
        kb = await index_set(knowledge, "alice")
        found = {mode: await recall(knowledge, "alice", kb, mode) for mode in ("text", "vector", "hybrid")}
        print(f"recall@5 on {backend.name}: {found}")
        assert found["text"] >= 0.9 and found["vector"] >= 0.8, found
        assert found["hybrid"] >= max(found["text"], found["vector"]), found

        # Bob: Alice's collection is not his to search, and her chunks are not his to cite.
        question = QUESTIONS[0].text
        assert await knowledge.search("bob", [kb], question, 5) == []
        hit = (await knowledge.search("alice", [kb], question, 5))[0]
        mine = KnowledgeScope(knowledge, "alice", [kb])
        theirs = KnowledgeScope(knowledge, "bob", [])
        assert (await mine.cite(1, source_of(hit), "quoted")).document_id == hit.document_id
        assert await theirs.cite(1, source_of(hit), "quoted") is None
        assert await mine.cite(1, "https://example.com/page", "quoted") is None
        # A deleted collection leaves no chunk to find or cite.
        await knowledge.delete_collection("alice", kb)
        assert await knowledge.search("alice", [kb], question, 5) == []
        assert await KnowledgeScope(knowledge, "alice", []).cite(1, source_of(hit), "quoted") is None
        assert backend.count("knowledge_chunks") == 0
        if backend.name == "sqlite":  # and no vector (in the vec0 table's own rowids table, or the fallback's)
            assert backend.count("knowledge_vectors") == 0
            if place.vec:
                assert backend.count("knowledge_vec_384_rowids") == 0
    finally:
        await knowledge.close()
        await store.close()

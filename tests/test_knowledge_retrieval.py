"""Retrieval over the labelled set (tests/knowledge_set.py) on every way the stores keep
vectors: full text finds most answers, the fake embeddings' vectors many, and fusing the two
is at least as good as either alone. And a search, or a citation, never reaches another
user's chunks; a deleted collection leaves no chunk or vector behind.

The ways: SQLite with sqlite-vec (needs a Python whose sqlite3 loads extensions: when this one
cannot, the same test runs under one that can, the system's Python of the same version), SQLite
without it, PostgreSQL without pgvector (the shared server here has none) and with it (a
private server from `pgserver`, which ships pgvector)."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import sysconfig
from pathlib import Path

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


EXPECT_VEC = "CHAT_AGENT_TEST_EXPECT_SQLITE_VEC"  # set when this file runs under a Python that loads extensions


def loads_extensions(python: str) -> bool:
    code = "import sqlite3; sqlite3.connect(':memory:').enable_load_extension(True)"
    return subprocess.run([python, "-c", code], capture_output=True).returncode == 0


async def test_hybrid_recall_is_at_least_either_alone(backend, embeddings):
    assert len(DOCUMENTS) >= 20 and len(QUESTIONS) >= 50
    store = backend.new()
    await store.open()  # the schema
    place = SqliteKnowledge(backend.where) if backend.name == "sqlite" else PostgresKnowledge(str(backend.where))
    await check_retrieval(backend, place, embeddings)
    await store.close()
    if os.environ.get(EXPECT_VEC) and backend.name == "sqlite":
        assert place.vec, "sqlite-vec was not loaded under a Python that loads extensions"


def test_the_sqlite_vec_path(tmp_path):
    """The vec0 tables are used where sqlite3 loads extensions. This Python may not (pyenv
    builds it without): then the SQLite case above runs again under the system's Python of the
    same minor version (same ABI for our compiled dependencies), with this virtualenv's packages."""
    if hasattr(sqlite3.Connection, "enable_load_extension") and loads_extensions(sys.executable):
        pytest.skip("this Python loads extensions: the sqlite case above already used sqlite-vec")
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    python = next((p for p in (f"/usr/bin/{version}", f"/usr/local/bin/{version}")
                   if Path(p).exists() and Path(p).resolve() != Path(sys.executable).resolve()
                   and loads_extensions(p)), None)
    if python is None:
        pytest.skip(f"no {version} here loads SQLite extensions: the sqlite-vec path is not exercised")
    # A virtualenv of that Python seeing this one's packages (a .pth file), so that the
    # server's own child processes (the document parser) find them too.
    root = Path(__file__).resolve().parent.parent
    venv = tmp_path / "venv"
    subprocess.run([python, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    site = next((venv / "lib").glob("python3*/site-packages"))
    paths = dict.fromkeys([str(root), sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])
    (site / "chat_agent_test.pth").write_text("\n".join(paths) + "\n")
    run = subprocess.run([str(venv / "bin" / "python"), "-m", "pytest", "-o", "addopts=", "-p", "no:cacheprovider",
                          "-q", f"{Path(__file__).relative_to(root)}::test_hybrid_recall_is_at_least_either_alone[sqlite]",
                          "--basetemp", str(tmp_path / "t")], cwd=root, env={**os.environ, EXPECT_VEC: "1"},
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0 and "1 passed" in run.stdout, run.stdout[-3000:] + run.stderr[-3000:]


@pytest.fixture(scope="module")
def pgvector_server(tmp_path_factory):
    pgserver = pytest.importorskip("pgserver", reason="pgserver (a private PostgreSQL with pgvector) is not installed")
    where = tmp_path_factory.mktemp("pgvector")
    where.chmod(0o777)  # as root, pgserver runs PostgreSQL as a user of its own
    server = pgserver.get_server(where / "data", cleanup_mode="stop")
    try:
        yield server
    finally:
        server.cleanup()


async def test_hybrid_recall_with_pgvector(pgvector_server, embeddings):
    from chat_agent.store.postgres import PostgresStore
    from tests.stores import Backend

    pgvector_server.psql("DROP DATABASE IF EXISTS knowledge_pgvector;")
    pgvector_server.psql("CREATE DATABASE knowledge_pgvector;")
    backend = Backend("postgres", pgvector_server.get_uri("knowledge_pgvector"))
    store = PostgresStore(str(backend.where))
    await store.open()
    place = PostgresKnowledge(str(backend.where))
    await check_retrieval(backend, place, embeddings)
    await store.close()
    assert place.pgvector, "pgvector was not used on a server that has it"
    assert backend.count("knowledge_pgvec_384") == 0  # the collection's deletion took its vectors


async def check_retrieval(backend, place, embeddings) -> None:
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

"""Knowledge bases end to end (PROTOCOL 1.2 "Knowledge bases and citations"): collections and
documents over HTTP from a real client, indexed by the server's background job, searched by
the agent's `search_knowledge`, and cited in the reply: `citation` frames, `citations` on the
stored text part, after a restart too. Another user sees none of it."""

from __future__ import annotations

import asyncio
import sqlite3
from typing import Iterator

import httpx
import pytest

from tests.fakes import openai_fake
from tests.fakes.anthropic_fake import CitedText, Reply, Text, ToolUse
from tests.fakes.openai_fake import Call, FakeOpenAI
from tests.samples import make_docx, make_pdf
from tests.support import connect, polled, recv, send, until

ALICE, BOB = "tok-a", "tok-b"
KEYS = "alice:tok-a,bob:tok-b"
FACT = "The Zephyr reactor coolant limit is 412 kelvin during the night shift."


def manual_pdf(pages: int = 50, fact_page: int = 37) -> bytes:
    """A manual whose every page talks of something of its own; the fact is on `fact_page`."""
    topics = ["maintenance schedules", "staff rotation", "visitor badges", "parking rules", "fire drills",
              "cafeteria menus", "printer supplies", "network outages", "holiday calendars", "travel expenses"]
    return make_pdf([[f"Operations manual, chapter {n}.",
                      f"This page covers {topics[n % len(topics)]} for team {n}.",
                      *([FACT] if n == fact_page else ["Nothing else of note is recorded on this page."])]
                     for n in range(1, pages + 1)])


def handbook_docx() -> bytes:
    def build(document) -> None:
        document.add_heading("Staff handbook", level=1)
        document.add_paragraph("Welcome to the company. This handbook explains how we work.")
        document.add_heading("Vacation", level=2)
        document.add_paragraph("Every employee receives twenty-eight vacation days per calendar year.")
        document.add_heading("Expenses", level=2)
        document.add_paragraph("Receipts are submitted within thirty days through the finance portal.")
    return make_docx(build)


def upload(server, name: str, data: bytes, token: str) -> str:
    response = httpx.post(f"{server.http_url}/api/uploads", files={"file": (name, data, "application/octet-stream")},
                          headers={"Authorization": f"Bearer {token}"}, timeout=30)
    assert response.status_code == 201, response.text
    return response.json()["uploadId"]


def api(server, method: str, path: str, token: str, body=None) -> tuple[int, object]:
    return server.request(method, path, token, body)


async def documents_settled(server, collection_id: str, token: str, count: int) -> list[dict]:
    def settled():
        status, body = api(server, "GET", f"/api/knowledge/{collection_id}/documents", token)
        assert status == 200, body
        docs = body["documents"]
        return docs if len(docs) == count and all(d["status"] != "indexing" for d in docs) else None
    return await polled(settled, 60)


def chunk_rows(data_dir, sql: str, *args) -> int:
    with sqlite3.connect(data_dir / "chat-agent.db") as db:
        return db.execute(sql, args).fetchone()[0]


def vector_rows(data_dir) -> int:
    """Vectors stored: in sqlite-vec's vec0 tables (read through their own rowids tables: this
    connection has no sqlite-vec), or in knowledge_vectors where Python's sqlite3 cannot load it."""
    with sqlite3.connect(data_dir / "chat-agent.db") as db:
        tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE name GLOB 'knowledge_vec_*_rowids'")]
        return sum(db.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in ["knowledge_vectors", *tables])


async def test_documents_are_indexed_searched_and_cited(make_server, fake_anthropic, tmp_path):
    data_dir = tmp_path / "data"
    server = make_server(data_dir, CHAT_AGENT_API_KEYS=KEYS)
    pdf_id = upload(server, "manual.pdf", manual_pdf(), ALICE)
    docx_id = upload(server, "handbook.docx", handbook_docx(), ALICE)
    status, collection = api(server, "POST", "/api/knowledge", ALICE, {"name": "Operations"})
    assert status == 201 and collection["name"] == "Operations"
    kb = collection["id"]
    for upload_id in (pdf_id, docx_id):
        status, added = api(server, "POST", f"/api/knowledge/{kb}/documents", ALICE, {"uploadId": upload_id})
        assert status == 202 and added["status"] == "indexing" and added["documentId"]
    docs = {d["filename"]: d for d in await documents_settled(server, kb, ALICE, 2)}
    pdf, handbook = docs["manual.pdf"], docs["handbook.docx"]
    assert pdf["status"] == "ready" and pdf["pages"] == 50 and pdf["chunks"] >= 50 and pdf["error"] is None
    assert handbook["status"] == "ready" and handbook["chunks"] >= 1 and pdf["runs"] == handbook["runs"] == 1
    status, listing = api(server, "GET", "/api/knowledge", ALICE)
    assert [(c["id"], c["documents"]) for c in listing["collections"]] == [(kb, 2)]

    # The model searches, and cites the first result it got.
    fake_anthropic.enqueue(Reply([ToolUse("search_knowledge", {"query": "Zephyr reactor coolant limit"})]),
                           Reply([Text("According to the manual, "), CitedText("the limit is 412 kelvin.", result=0),
                                  Text(" Anything else?")]))
    ws, session = await connect(server, token=ALICE)
    assert {"knowledge", "citations"} <= set(session["features"])
    await send(ws, type="message", content="What is the coolant limit?", settings={"knowledge": [kb]})
    frames = await until(ws, "done", timeout=60)
    conversation_id = frames[-1]["conversationId"]
    searched = [f for f in frames if f["type"] == "tool_end" and f["name"] == "search_knowledge"][0]
    assert not searched["isError"] and searched["output"]["results"][0]["page"] == 37
    # The model's second request holds the page-37 chunk as a citable search result.
    results = [b for m in fake_anthropic.main_bodies[-1]["messages"] if isinstance(m["content"], list)
               for r in m["content"] if r["type"] == "tool_result" for b in r["content"]
               if isinstance(r["content"], list) and b["type"] == "search_result"]
    assert FACT in results[0]["content"][0]["text"] and "page 37" in results[0]["title"]
    assert "search_knowledge" in [t["name"] for t in fake_anthropic.main_bodies[-2]["tools"]]  # the turn's first call
    cited = [f for f in frames if f["type"] == "citation"]
    assert len(cited) == 1 and isinstance(cited[0]["seq"], int)
    citation = cited[0]["citation"]
    assert citation == {"index": 1, "documentId": pdf["documentId"], "filename": "manual.pdf", "page": 37,
                        "quote": results[0]["content"][0]["text"]}
    # It is attached to the text streamed before it: after the cited sentence, before the rest.
    before = "".join(f["content"] for f in frames[:frames.index(cited[0])] if f["type"] == "content_chunk")
    assert before.endswith("the limit is 412 kelvin.")
    await ws.close()

    def stored_citations(token: str = ALICE) -> list[dict]:
        status, body = api(server, "GET", f"/api/conversations/{conversation_id}/messages", token)
        assert status == 200, body
        return [c for m in body["messages"] for p in m["parts"] if p["type"] == "text" for c in p.get("citations", [])]

    # Stored with where it was shown: after "According to the manual, the limit is 412 kelvin."
    stored = {**citation, "offset": len(before)}
    assert stored_citations() == [stored]
    # A message without knowledge is not offered the tool.
    fake_anthropic.enqueue(Reply("Plain answer."))
    ws, _ = await connect(server, conversation_id, token=ALICE)
    await send(ws, type="message", content="Thanks")
    await until(ws, "done", timeout=60)
    assert "search_knowledge" not in [t["name"] for t in fake_anthropic.main_bodies[-1]["tools"]]
    await ws.close()

    # After a restart: the stored part, and the session's, still carry the citation.
    server.close()
    server = make_server(data_dir, CHAT_AGENT_API_KEYS=KEYS)
    ws, session = await connect(server, conversation_id, token=ALICE)
    cited_reply = session["messages"][-3]
    assert [c for p in cited_reply["parts"] if p["type"] == "text" for c in p.get("citations", [])] == [stored]
    await ws.close()

    # Bob sees nothing of Alice's: not her collection, its documents, nor her conversation.
    assert api(server, "GET", "/api/knowledge", BOB) == (200, {"collections": []})
    assert api(server, "GET", f"/api/knowledge/{kb}/documents", BOB)[0] == 404
    assert api(server, "POST", f"/api/knowledge/{kb}/documents", BOB, {"uploadId": pdf_id})[0] == 404
    assert api(server, "DELETE", f"/api/knowledge/{kb}/documents/{pdf['documentId']}", BOB)[0] == 404
    assert api(server, "DELETE", f"/api/knowledge/{kb}", BOB)[0] == 404
    status, bobs = api(server, "POST", "/api/knowledge", BOB, {"name": "Mine"})
    assert status == 201
    # Alice's upload into Bob's collection: no such upload, for him.
    assert api(server, "POST", f"/api/knowledge/{bobs['id']}/documents", BOB, {"uploadId": pdf_id})[0] == 404
    ws, _ = await connect(server, token=BOB)
    await send(ws, type="message", content="What is the coolant limit?", settings={"knowledge": [kb]})
    refused = await recv(ws)
    assert refused["type"] == "error" and refused["code"] == "not_found"
    await ws.close()

    # Deleting the PDF takes its chunks out of the table and of the full-text index.
    assert chunk_rows(data_dir, "SELECT COUNT(*) FROM knowledge_fts WHERE knowledge_fts MATCH 'zephyr'") == 1
    assert api(server, "DELETE", f"/api/knowledge/{kb}/documents/{pdf['documentId']}", ALICE)[0] == 204
    assert chunk_rows(data_dir, "SELECT COUNT(*) FROM knowledge_chunks WHERE document_id = ?", pdf["documentId"]) == 0
    assert chunk_rows(data_dir, "SELECT COUNT(*) FROM knowledge_fts WHERE knowledge_fts MATCH 'zephyr'") == 0
    assert api(server, "DELETE", f"/api/knowledge/{kb}/documents/{pdf['documentId']}", ALICE)[0] == 404
    # And the collection, with what is left.
    assert api(server, "DELETE", f"/api/knowledge/{kb}", ALICE)[0] == 204
    assert chunk_rows(data_dir, "SELECT COUNT(*) FROM knowledge_chunks WHERE collection_id = ?", kb) == 0
    assert chunk_rows(data_dir, "SELECT COUNT(*) FROM knowledge_fts WHERE knowledge_fts MATCH 'vacation'") == 0
    assert api(server, "GET", "/api/knowledge", ALICE) == (200, {"collections": []})
    # The stored citation stays as it was shown (the reply is history), pointing at a deleted document.
    assert stored_citations() == [stored]


async def test_bad_requests_and_failed_documents(server):
    # The module's server has auth off: the one local user.
    assert server.request("POST", "/api/knowledge", None, {})[0] == 400
    assert server.request("POST", "/api/knowledge", None, {"name": 5})[0] == 400
    assert server.request("POST", "/api/knowledge", None, {"name": "  "})[0] == 400
    assert server.request("POST", "/api/knowledge", None, {"name": "x" * 201})[0] == 400
    raw = httpx.post(f"{server.http_url}/api/knowledge", content=b"{not json", timeout=10)
    assert raw.status_code == 400 and raw.json()["error"]["code"] == "invalid_request"
    assert server.request("DELETE", "/api/knowledge/kb_nope", None)[0] == 404
    assert server.request("GET", "/api/knowledge/kb_nope/documents", None)[0] == 404
    status, kb = server.request("POST", "/api/knowledge", None, {"name": "Odds"})
    assert status == 201
    documents = f"/api/knowledge/{kb['id']}/documents"
    assert server.request("POST", documents, None, {})[0] == 400
    assert server.request("POST", documents, None, {"uploadId": 7})[0] == 400
    assert server.request("POST", documents, None, {"uploadId": "file_nope"})[0] == 404
    assert server.request("POST", "/api/knowledge/kb_nope/documents", None, {"uploadId": "file_nope"})[0] == 404
    image = httpx.post(f"{server.http_url}/api/uploads", timeout=30,
                       files={"file": ("dot.png", __import__("tests.samples").samples.make_png(), "image/png")})
    assert server.request("POST", documents, None, {"uploadId": image.json()["uploadId"]})[0] == 415

    # What cannot be read fails, and says why; what can is ready, HTML included.
    blank = upload_anonymous(server, "blank.txt", b"   \n\n   \n")
    page = upload_anonymous(server, "page.html", b"<html><body><h1>Tides</h1><p>High tide is at noon.</p>"
                                                 b"<script>var hidden = 1;</script></body></html>")
    for upload_id in (blank, page):
        assert server.request("POST", documents, None, {"uploadId": upload_id})[0] == 202
    docs = {d["filename"]: d for d in await documents_settled(server, kb["id"], None, 2)}
    assert docs["blank.txt"]["status"] == "failed" and "no text" in docs["blank.txt"]["error"]
    assert docs["page.html"]["status"] == "ready" and docs["page.html"]["error"] is None


def upload_anonymous(server, name: str, data: bytes) -> str:
    response = httpx.post(f"{server.http_url}/api/uploads", files={"file": (name, data, "application/octet-stream")},
                          timeout=30)
    assert response.status_code == 201, response.text
    return response.json()["uploadId"]


# ---- an OpenAI-compatible model, and vectors from an embeddings endpoint --------------------

@pytest.fixture(scope="module")
def fake_openai() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as fake:
        yield fake


async def test_openai_markers_become_citations_and_vectors_are_searched(make_server, fake_openai, tmp_path):
    data_dir = tmp_path / "data"
    server = make_server(data_dir, OPENAI_BASE_URL=fake_openai.base_url, OPENAI_API_KEY=fake_openai.api_key,
                         CHAT_AGENT_MODEL="openai:gpt-test", CHAT_AGENT_SMALL_MODEL="openai:gpt-small",
                         CHAT_AGENT_EMBEDDINGS_MODEL="embed-test")
    status, kb = server.request("POST", "/api/knowledge", None, {"name": "Manuals"})
    assert status == 201
    upload_id = upload_anonymous(server, "manual.pdf", manual_pdf())
    assert server.request("POST", f"/api/knowledge/{kb['id']}/documents", None, {"uploadId": upload_id})[0] == 202
    [doc] = await documents_settled(server, kb["id"], None, 1)
    assert doc["status"] == "ready", doc
    # Every chunk has its vector, from the endpoint, in batches.
    assert vector_rows(data_dir) == doc["chunks"]
    embedded = sum(len(r["input"]) for r in fake_openai.embedding_requests if r["model"] == "embed-test")
    assert embedded >= doc["chunks"]

    main = lambda body: body["model"] == "gpt-test"  # noqa: E731  (titles go to the small model)
    search = Call("search_knowledge", {"query": "coolant limit of the Zephyr reactor"})
    fake_openai.enqueue(openai_fake.Reply(calls=[search]),
                        openai_fake.Reply("The limit is 412 kelvin [1], at night [1, 9]."), when=main)
    queries_before = len(fake_openai.embedding_requests)
    ws, _ = await connect(server)
    await send(ws, type="message", content="Coolant limit?", settings={"knowledge": [kb["id"]]})
    frames = await until(ws, "done", timeout=60)
    # The query was embedded too: the search was hybrid.
    assert [r["input"] for r in fake_openai.embedding_requests[queries_before:]] == [
        ["coolant limit of the Zephyr reactor"]]
    second = [b for b in fake_openai.requests if main(b)][-1]
    tool_message = [m for m in second["messages"] if m["role"] == "tool"][-1]["content"]
    assert "cite it by writing its number in square brackets" in tool_message
    assert "[1] manual.pdf — page 37" in tool_message and FACT in tool_message
    cited = [f["citation"] for f in frames if f["type"] == "citation"]
    # `[1]` twice (the second inside `[1, 9]`); 9 is no source of this request, so it is no citation.
    assert [c["index"] for c in cited] == [1, 1] and all(c["page"] == 37 and FACT in c["quote"] for c in cited)
    assert cited[0]["documentId"] == doc["documentId"] and cited[0]["filename"] == "manual.pdf"
    status, body = server.request("GET", f"/api/conversations/{frames[-1]['conversationId']}/messages", None)
    parts = body["messages"][-1]["parts"]
    text = "".join(f["content"] for f in frames if f["type"] == "content_chunk")
    offsets = [text.index("[1]") + 3, text.index("[1, 9]") + 6]  # each right after its marker
    assert [c for p in parts if p["type"] == "text" for c in p.get("citations", [])] == [
        {**c, "offset": at} for c, at in zip(cited, offsets)]
    await ws.close()
    # The collection's deletion takes the vectors with the chunks.
    deleted = server.request("DELETE", f"/api/knowledge/{kb['id']}", None)
    assert deleted[0] == 204, (deleted, server.log()[-3000:])
    assert vector_rows(data_dir) == 0


# ---- PostgreSQL, two instances ------------------------------------------------------------------

from tests.instances import instances, moto, s3_env  # noqa: E402,F401  (fixtures)


async def test_two_instances_on_postgresql_index_each_document_once(instances, fake_anthropic, fake_openai):
    import psycopg

    a, b = instances(2, OPENAI_BASE_URL=fake_openai.base_url, OPENAI_API_KEY=fake_openai.api_key,
                     CHAT_AGENT_EMBEDDINGS_MODEL="embed-test")
    status, kb = a.request("POST", "/api/knowledge", None, {"name": "Shared"})
    assert status == 201
    pdf = upload_anonymous(a, "manual.pdf", manual_pdf())
    others = [upload_anonymous(b, f"note-{n}.md", f"# Note {n}\n\nThe harbour crane number {n} lifts "
                                                 f"{n * 10} tonnes.\n".encode()) for n in range(5)]
    for n, upload_id in enumerate([pdf, *others]):
        server = (a, b)[n % 2]  # added on both instances
        assert server.request("POST", f"/api/knowledge/{kb['id']}/documents", None, {"uploadId": upload_id})[0] == 202
    docs = await documents_settled(b, kb["id"], None, 6)
    assert all(d["status"] == "ready" for d in docs), docs
    assert [d["runs"] for d in docs] == [1] * 6  # one job per document ran, on one of the two
    with psycopg.connect(instances.url) as conn:
        vectors = conn.execute("SELECT COUNT(*), COUNT(embedding) FROM knowledge_chunks").fetchone()
    assert vectors[0] == vectors[1] == sum(d["chunks"] for d in docs)

    fake_anthropic.enqueue(Reply([ToolUse("search_knowledge", {"query": "Zephyr reactor coolant limit"})]),
                           Reply([CitedText("It is 412 kelvin.", result=0)]))
    ws, _ = await connect(b)
    await send(ws, type="message", content="What is the coolant limit?", settings={"knowledge": [kb["id"]]})
    frames = await until(ws, "done", timeout=60)
    [citation] = [f["citation"] for f in frames if f["type"] == "citation"]
    pdf_doc = next(d for d in docs if d["filename"] == "manual.pdf")
    assert citation["page"] == 37 and citation["documentId"] == pdf_doc["documentId"] and FACT in citation["quote"]
    await ws.close()

    assert a.request("DELETE", f"/api/knowledge/{kb['id']}", None)[0] == 204
    with psycopg.connect(instances.url) as conn:
        assert conn.execute("SELECT COUNT(*) FROM knowledge_chunks").fetchone()[0] == 0
        assert conn.execute("SELECT COUNT(*) FROM knowledge_documents").fetchone()[0] == 0


def test_the_python_client_prints_the_sources(server, fake_anthropic):
    import subprocess
    import sys

    from tests import reaper
    from tests.support import ROOT

    status, kb = server.request("POST", "/api/knowledge", None, {"name": "Handbook"})
    assert status == 201
    upload_id = upload_anonymous(server, "handbook.docx", handbook_docx())
    assert server.request("POST", f"/api/knowledge/{kb['id']}/documents", None, {"uploadId": upload_id})[0] == 202
    asyncio.run(documents_settled(server, kb["id"], None, 1))
    fake_anthropic.enqueue(Reply([ToolUse("search_knowledge", {"query": "vacation days"})]),
                           Reply([CitedText("Twenty-eight days a year.", result=0, quote="twenty-eight vacation days")]))
    result: subprocess.CompletedProcess[str] = reaper.run(
        [sys.executable, "-m", "chat_agent.client", "--url", server.ws_url, "--knowledge", kb["id"],
         "--message", "How many vacation days?"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "Twenty-eight days a year." in result.stdout
    assert "[1] handbook.docx — “twenty-eight vacation days”" in result.stdout + result.stderr
    assert "search_knowledge" in result.stderr and "handbook.docx" in result.stderr  # the tool card's result


async def test_adding_documents_counts_against_the_upload_quota(make_server):
    server = make_server(CHAT_AGENT_LIMITS="uploads_per_minute=3")
    status, kb = server.request("POST", "/api/knowledge", None, {"name": "Quota"})
    upload_id = upload_anonymous(server, "a.md", b"# A\n\nSome text.\n")  # the first of three
    documents = f"/api/knowledge/{kb['id']}/documents"
    assert server.request("POST", documents, None, {"uploadId": upload_id})[0] == 202
    assert server.request("POST", documents, None, {"uploadId": upload_id})[0] == 202
    refused = httpx.post(server.http_url + documents, json={"uploadId": upload_id}, timeout=10)
    assert refused.status_code == 429 and int(refused.headers["Retry-After"]) >= 1
    assert refused.json()["error"]["code"] == "rate_limited"
    assert len(await documents_settled(server, kb["id"], None, 2)) == 2


async def test_a_document_fails_with_its_reason_when_the_embeddings_endpoint_is_down(make_server):
    from tests.support import free_port

    server = make_server(OPENAI_BASE_URL=f"http://127.0.0.1:{free_port()}/v1", OPENAI_API_KEY="sk-none",
                         CHAT_AGENT_EMBEDDINGS_MODEL="embed-test")
    status, kb = server.request("POST", "/api/knowledge", None, {"name": "Unreachable"})
    upload_id = upload_anonymous(server, "a.md", b"# A\n\nSome text.\n")
    assert server.request("POST", f"/api/knowledge/{kb['id']}/documents", None, {"uploadId": upload_id})[0] == 202
    [doc] = await documents_settled(server, kb["id"], None, 1)
    assert doc["status"] == "failed" and "embeddings endpoint could not be reached" in doc["error"], doc

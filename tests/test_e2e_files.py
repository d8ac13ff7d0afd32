"""Uploads and attachments from a real client: documents and images reach the model, hostile
files are refused with clear errors, and the server carries on."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import random
import sqlite3
import time
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from PIL import Image

from tests import pace
from tests.fakes.anthropic_fake import Reply, ToolUse
from tests.samples import bomb_png, long_pdf, make_docx, make_pdf, make_png
from tests.support import connect, recv, send, text_of, until

DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"


def upload(server, name: str, data: bytes, token: str | None = None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.post(f"{server.http_url}/api/uploads", files={"file": (name, data, "application/octet-stream")},
                      headers=headers, timeout=30)


def user_blocks(body: dict) -> list[dict]:
    """The content of the newest user message the model was sent."""
    return [m for m in body["messages"] if m["role"] == "user"][-1]["content"]


def texts(blocks: list[dict]) -> str:
    return "\n".join(b.get("text", "") for b in blocks if b["type"] == "text")


async def ask(ws, content: str, attachments: list[dict], **extra) -> list[dict]:
    await send(ws, type="message", content=content, attachments=attachments, **extra)
    return await until(ws, "done", timeout=60)


async def still_serves(ws, fake_anthropic) -> None:
    """The socket survived and the next turn works."""
    await send(ws, type="ping")
    assert (await recv(ws))["type"] == "pong"
    fake_anthropic.enqueue(Reply("still here"))
    frames = await ask(ws, "hello?", [])
    assert text_of(frames) == "still here" and frames[-1]["stopReason"] == "end_turn"


# ---- uploads over HTTP ----------------------------------------------------------------------

def test_upload_types_come_from_the_bytes(server):
    cases = [("report.pdf", make_pdf([["Hello"]]), "application/pdf"),
             ("notes.docx", make_docx(lambda d: d.add_paragraph("Hi")), DOCX),
             ("photo.jpg", make_png(), "image/png"),  # a PNG named .jpg is a PNG
             ("table.csv", b"a,b\n1,2\n", "text/csv"),
             ("readme.md", "# Title\n".encode(), "text/markdown"),
             ("plain", b"just text", "text/plain")]
    for name, data, media_type in cases:
        response = upload(server, name, data)
        assert response.status_code == 201, (name, response.text)
        body = response.json()
        assert body["mediaType"] == media_type and body["size"] == len(data) and body["filename"] == name
        got = httpx.get(f"{server.http_url}/api/uploads/{body['uploadId']}")
        assert got.status_code == 200 and got.content == data
        assert got.headers["content-type"].startswith(media_type)


def test_upload_refusals(server):
    fake_png = upload(server, "cat.png", b"this is text, not a picture\n" * 10)
    assert fake_png.status_code == 415 and "png" in fake_png.json()["error"]["message"].lower()
    assert upload(server, "tool.exe", b"MZ\x90\x00\x03" + bytes(200)).status_code == 415
    missing = httpx.post(f"{server.http_url}/api/uploads", files={"other": ("a.txt", b"x")})
    assert missing.status_code == 400
    assert httpx.get(f"{server.http_url}/api/uploads/file_000000000000000000000000").status_code == 404


def test_upload_size_limit(make_server):
    small = make_server(CHAT_AGENT_UPLOAD_MAX_BYTES="1000")
    assert upload(small, "a.txt", b"x" * 1000).status_code == 201
    too_big = upload(small, "b.txt", b"x" * 5000)
    assert too_big.status_code == 413 and too_big.json()["error"]["code"] == "too_large"


def test_uploads_belong_to_their_owner(make_server):
    server = make_server(CHAT_AGENT_API_KEYS="ann:tok-ann,bob:tok-bob")
    assert upload(server, "a.txt", b"secret notes").status_code == 401
    file_id = upload(server, "a.txt", b"secret notes", token="tok-ann").json()["uploadId"]
    url = f"{server.http_url}/api/uploads/{file_id}"
    assert httpx.get(url, headers={"Authorization": "Bearer tok-ann"}).content == b"secret notes"
    assert httpx.get(url, params={"token": "tok-ann"}).status_code == 200
    assert httpx.get(url, headers={"Authorization": "Bearer tok-bob"}).status_code == 404
    assert httpx.get(url).status_code == 401


# ---- documents ------------------------------------------------------------------------------

async def test_pdf_and_docx_uploads_reach_the_model(server, fake_anthropic):
    pdf = upload(server, "minutes.pdf", make_pdf([["The meeting approved the budget of 42 ducats."],
                                                   ["Next meeting: Thursday."]])).json()
    docx_file = upload(server, "plan.docx", make_docx(lambda d: (d.add_heading("Plan", 1),
                                                                  d.add_paragraph("Ship the canvas in May."),
                                                                  d.add_table(rows=1, cols=2)))).json()
    ws, _ = await connect(server)
    fake_anthropic.enqueue(Reply("The budget is 42 ducats and the canvas ships in May."))
    frames = await ask(ws, "What do these say?", [{"type": "document", "uploadId": pdf["uploadId"]},
                                                 {"type": "document", "uploadId": docx_file["uploadId"]}])
    assert frames[-1]["stopReason"] == "end_turn"
    seen = texts(user_blocks(fake_anthropic.last_main.body))
    assert "42 ducats" in seen and "Thursday" in seen and "Ship the canvas in May." in seen
    assert "minutes.pdf" in seen and "plan.docx" in seen and "What do these say?" in seen
    session_messages = (await connect(server, frames[-1]["conversationId"]))[1]["messages"]
    attachments = session_messages[0]["attachments"]
    assert [a["filename"] for a in attachments] == ["minutes.pdf", "plan.docx"]
    assert attachments[0]["fileId"] == pdf["uploadId"] and attachments[0]["parts"] == 2
    await ws.close()


async def test_a_long_pdf_is_read_on_demand(server, fake_anthropic):
    pdf = upload(server, "annual.pdf", long_pdf(500)).json()
    ws, _ = await connect(server)
    fake_anthropic.enqueue(Reply([ToolUse("analyze_document", {"query": "xylophone budget"})]),
                           Reply([ToolUse("analyze_document", {"document_id": pdf["uploadId"], "parts": "377"})]),
                           Reply("Page 377 covers the xylophone budget."))
    frames = await ask(ws, "Where is the xylophone budget?", [{"type": "document", "uploadId": pdf["uploadId"]}])
    first = fake_anthropic.main_bodies[-3]
    shown = texts(user_blocks(first))
    assert "500 pages" in shown and "analyze_document" in shown and len(json.dumps(first)) < 60_000
    ends = [f for f in frames if f["type"] == "tool_end"]
    assert [e["isError"] for e in ends] == [False, False]
    results = [b for m in fake_anthropic.last_main.body["messages"] for b in m["content"]
               if isinstance(b, dict) and b.get("type") == "tool_result"]
    assert "page 377" in results[-2]["content"] and "Report page 377." in results[-1]["content"]
    assert text_of(frames) == "Page 377 covers the xylophone budget."
    await ws.close()


async def test_client_extracted_text(server, fake_anthropic):
    ws, _ = await connect(server)
    fake_anthropic.enqueue(Reply("ok"))
    await ask(ws, "Summarize", [{"type": "document", "content": "Alpha beta gamma.", "filename": "a.txt"}])
    assert "Alpha beta gamma." in texts(user_blocks(fake_anthropic.last_main.body))
    big = "Lorem ipsum dolor sit amet. " * 2000  # 56k characters: read on demand
    fake_anthropic.enqueue(Reply([ToolUse("analyze_document", {"parts": "1"})]), Reply("read it"))
    frames = await ask(ws, "Summarize this one", [{"type": "document", "content": big, "filename": "big.md"}])
    shown = texts(user_blocks(fake_anthropic.main_bodies[-2]))
    assert "analyze_document" in shown and len(shown) < 5_000
    assert [f["isError"] for f in frames if f["type"] == "tool_end"] == [False]
    await ws.close()


# ---- images ---------------------------------------------------------------------------------

def image_blocks(body: dict) -> list[dict]:
    return [b for b in user_blocks(body) if b["type"] == "image"]


async def test_images_reach_the_model(server, fake_anthropic):
    uploaded = upload(server, "red.png", make_png(40, 30)).json()
    big = io.BytesIO()
    Image.new("RGB", (4000, 1000), (0, 90, 200)).save(big, "JPEG", quality=90)
    ws, _ = await connect(server)
    fake_anthropic.enqueue(Reply("A red rectangle and a blue strip."))
    frames = await ask(ws, "What are these?", [
        {"type": "image", "uploadId": uploaded["uploadId"]},
        {"type": "image", "data": base64.b64encode(big.getvalue()).decode(), "mediaType": "image/jpeg"}])
    assert frames[-1]["stopReason"] == "end_turn"
    body = fake_anthropic.last_main.body
    sent = image_blocks(body)
    assert [b["source"]["media_type"] for b in sent] == ["image/png", "image/jpeg"]
    with Image.open(io.BytesIO(base64.b64decode(sent[1]["source"]["data"]))) as scaled:
        assert max(scaled.size) == 1568  # scaled down to the long edge Claude recommends
    assert uploaded["uploadId"] in texts(user_blocks(body))
    messages = (await connect(server, frames[-1]["conversationId"]))[1]["messages"]
    visible = messages[0]["attachments"]
    assert [a["type"] for a in visible] == ["image", "image"] and visible[1]["width"] == 4000
    stored = httpx.get(server.http_url + visible[1]["url"])
    assert stored.status_code == 200 and stored.content == big.getvalue()
    await ws.close()


class _Local(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 - the stdlib's name
        self.server.hits += 1  # type: ignore[attr-defined]
        data = make_png()
        self.send_response(200)
        self.send_header("Content-Type", "image/png")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def local_image_server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Local)
    httpd.hits = 0  # type: ignore[attr-defined]
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()


async def test_hostile_attachments_get_clear_errors(server, fake_anthropic, local_image_server):
    port = local_image_server.server_address[1]
    broken_pdf = upload(server, "broken.pdf", b"%PDF-1.7\n" + bytes(range(256)) * 40).json()
    text_file = upload(server, "notes.txt", b"not an image").json()
    ws, session = await connect(server)
    cases = [
        ({"type": "image", "data": base64.b64encode(bomb_png()).decode(), "mediaType": "image/png"},
         "invalid_attachment", "pixels"),
        ({"type": "image", "data": base64.b64encode(b"hello, I am text" * 20).decode(), "mediaType": "image/png"},
         "invalid_attachment", "image"),
        ({"type": "image", "data": "%%% not base64 %%%"}, "invalid_attachment", "base64"),
        ({"type": "image", "url": f"http://127.0.0.1:{port}/cat.png"}, "invalid_attachment", "address"),
        ({"type": "image", "url": "file:///etc/passwd"}, "invalid_attachment", ""),
        ({"type": "image", "uploadId": text_file["uploadId"]}, "invalid_attachment", "not an image"),
        ({"type": "document", "uploadId": broken_pdf["uploadId"]}, "invalid_attachment", "broken.pdf"),
        ({"type": "document", "uploadId": "file_ffffffffffffffffffffffff"}, "not_found", ""),
        ({"type": "image"}, "invalid_frame", "exactly one"),
    ]
    for attachment, code, words in cases:
        await send(ws, type="message", content="look", attachments=[attachment])
        error = await recv(ws, timeout=30)
        assert error["type"] == "error" and error["code"] == code, (attachment, error)
        assert words.lower() in error["message"].lower() and "Traceback" not in error["message"]
    assert local_image_server.hits == 0  # the server never connected to its own network
    # A good image beside a bad one: the message is refused whole, the good one not kept either.
    good = {"type": "image", "data": base64.b64encode(make_png()).decode(), "mediaType": "image/png"}
    await send(ws, type="message", content="look", attachments=[good, cases[0][0]])
    assert (await recv(ws, timeout=30))["code"] == "invalid_attachment"
    with sqlite3.connect(f"file:{server.data_dir / 'chat-agent.db'}?mode=ro", uri=True) as db:
        linked = db.execute("SELECT count(*) FROM conversation_files WHERE conversation_id = ?",
                            (session["conversationId"],)).fetchone()[0]
    assert linked == 0
    await still_serves(ws, fake_anthropic)
    # Nothing of the refused messages was kept.
    messages = (await connect(server, session["conversationId"]))[1]["messages"]
    assert [m["content"] for m in messages] == ["hello?", "still here"]
    await ws.close()



async def test_an_image_too_big_for_a_frame_points_to_uploads(server, fake_anthropic):
    ws, _ = await connect(server)
    noise = Image.frombytes("RGB", (700, 700), random.Random(7).randbytes(700 * 700 * 3))
    out = io.BytesIO()
    noise.save(out, "PNG")
    assert len(out.getvalue()) > 800_000  # over 1 MiB once base64-encoded
    await send(ws, type="message", content="look",
               attachments=[{"type": "image", "data": base64.b64encode(out.getvalue()).decode()}])
    error = await recv(ws)
    assert error["code"] == "too_large" and "/api/uploads" in error["message"]
    await still_serves(ws, fake_anthropic)
    await ws.close()


async def test_abort_while_a_long_document_is_parsed(server, fake_anthropic):
    pdf = upload(server, "huge.pdf", long_pdf(4000)).json()  # seconds to parse
    ws, session = await connect(server)
    await send(ws, type="message", content="read it", attachments=[{"type": "document", "uploadId": pdf["uploadId"]}])
    await asyncio.sleep(0.3)
    await send(ws, type="ping")
    assert (await recv(ws))["type"] == "pong"  # frames are read while the document is parsed
    await send(ws, type="message", content="another")
    assert (await recv(ws))["code"] == "busy"
    started = time.monotonic()
    await send(ws, type="abort")
    done = await recv(ws)
    assert done["type"] == "done" and done["stopReason"] == "aborted"
    assert time.monotonic() - started < pace.scaled(1.0)
    await still_serves(ws, fake_anthropic)
    messages = (await connect(server, session["conversationId"]))[1]["messages"]
    assert [m["content"] for m in messages] == ["hello?", "still here"]  # nothing of the aborted one
    await ws.close()

"""Files: type sniffing from the bytes, local blob storage, the files tables of the store,
and `Files` over a real SQLite store and a real directory."""

from __future__ import annotations

import asyncio
import io
import select
import socket
import sqlite3
import struct
import zipfile
import zlib
from collections.abc import Iterator
from pathlib import Path

import docx
import httpx
import pytest
from PIL import Image

from chat_agent.files.blobs import BlobNotFound, LocalBlobs, S3Blobs, open_blobs
from chat_agent.config import Settings
from chat_agent.files.catalog import FileError, Files, StoredFile, clean_filename, open_files
from chat_agent.files.sniff import DOCX, sniff
from chat_agent.store import sqlite as sqlite_store
from chat_agent.store import (AddFile, AttachFile, ConstraintError, CreateConversation, DeleteConversation,
                              FileRecord, SqliteStore, op_scope, schema)
from chat_agent.store.writes import plan

ALICE, BOB = "alice", "bob"


# ---- samples, made here ----------------------------------------------------------------------

def image(fmt: str, size: tuple[int, int] = (40, 30)) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, (200, 80, 20)).save(out, fmt)
    return out.getvalue()


def word_document(text: str = "Hello") -> bytes:
    document = docx.Document()
    document.add_paragraph(text)
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def zip_of(members: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return out.getvalue()


def declaring_huge(data: bytes) -> bytes:
    """The zip with each member's size in the central directory raised to 2 GB, as a bomb
    declares it (nothing here is ever inflated, so the lie costs nothing to make)."""
    out = bytearray(data)
    start = out.find(b"PK\x01\x02")
    while start != -1:
        out[start + 24:start + 28] = struct.pack("<I", 0x7FFF_FFFF)
        start = out.find(b"PK\x01\x02", start + 4)
    return bytes(out)


def png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png_header(width: int, height: int) -> bytes:
    """A PNG declaring width x height whose pixel data is a few bytes: a header to read, a
    decompression bomb to decode."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) + png_chunk(b"IDAT", zlib.compress(bytes(64)))
            + png_chunk(b"IEND", b""))


PDF = b"%PDF-1.4\n1 0 obj\n<< /Type /Catalog >>\nendobj\ntrailer\n<< /Root 1 0 R >>\n%%EOF\n"


# ---- sniff -----------------------------------------------------------------------------------

@pytest.mark.parametrize("data, name, media_type", [
    (image("PNG"), "a.png", "image/png"),
    (image("JPEG"), "a.jpg", "image/jpeg"),
    (image("GIF"), "a.gif", "image/gif"),
    (image("WEBP"), "a.webp", "image/webp"),
    (image("WEBP"), "from-a-cdn.jpg", "image/webp"),  # an image named as another image: the bytes decide
    (image("PNG"), "no-extension", "image/png"),
    (PDF, "report.pdf", "application/pdf"),
    (PDF, "report.txt", "application/pdf"),  # a name that claims text does not make it text
    (word_document(), "notes.docx", DOCX),
    (b"plain words\n", "notes.txt", "text/plain"),
    (b"# Title\n", "README.md", "text/markdown"),
    (b"# Title\n", "notes.MARKDOWN", "text/markdown"),
    (b"a,b\n1,2\n", "table.csv", "text/csv"),
    ("\ufeffcaf\u00e9, na\u00efve\n".encode(), "bom.csv", "text/csv"),  # a UTF-8 BOM is fine
    ("\u65e5\u672c\u8a9e\n".encode(), "script.py", "text/plain"),  # any other name: plain text
])
def test_sniff_decides_from_the_bytes(data: bytes, name: str, media_type: str) -> None:
    assert sniff(data, name) == media_type


@pytest.mark.parametrize("data, name, says", [
    (b"this is text, not a picture\n", "cat.png", "named as an image, but its content is text"),
    (zip_of({"a.txt": b"x"}), "a.pdf", "named as a PDF, but its content is a ZIP archive"),
    (PDF, "a.docx", "named as a Word document, but its content is a PDF"),
    (image("PNG"), "scan.pdf", "named as a PDF, but its content is a PNG image"),
    (b"just words", "letter.docx", "its content is text"),
    (zip_of({"a.txt": b"x"}), "archive.zip", "a ZIP archive, not a Word document"),
    (b"PK\x03\x04" + bytes(64), "broken.docx", "a damaged ZIP archive"),
    (b"\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIH", "cut.png", "header is truncated"),
    (b"text\x00with a NUL\n", "notes.txt", "binary data"),
    ("caf\u00e9".encode("latin-1"), "latin1.txt", "neither UTF-8 text"),
    (b"MZ\x90\x00\x03" + bytes(100), "tool.exe", "binary data"),
    (b"", "empty.txt", "is empty"),
])
def test_sniff_refuses_with_a_reason(data: bytes, name: str, says: str) -> None:
    with pytest.raises(FileError) as caught:
        sniff(data, name)
    assert caught.value.code == "unsupported_type"
    assert says in caught.value.message and repr(name) in caught.value.message


def test_sniff_refuses_zip_bombs_by_what_they_declare() -> None:
    bomb = declaring_huge(zip_of({"word/document.xml": b"<w:document/>", "[Content_Types].xml": b"<Types/>"}))
    with pytest.raises(FileError, match="expands to more than 300 MB"):
        sniff(bomb, "bomb.docx")
    crowded = zip_of({"word/document.xml": b"x", **{f"word/media/{n}.bin": b"" for n in range(5_001)}})
    with pytest.raises(FileError, match="more than 5,000 parts"):
        sniff(crowded, "crowded.docx")


# ---- LocalBlobs ------------------------------------------------------------------------------

async def test_local_blobs_round_trip_and_never_leave_their_directory(tmp_path: Path) -> None:
    blobs = LocalBlobs(tmp_path / "files")
    await blobs.put("file_1/original.png", b"one", "image/png")
    await blobs.put("file_1/original.png", b"two", "image/png")  # replaced whole
    assert await blobs.get("file_1/original.png") == b"two"
    assert [p.name for p in (tmp_path / "files" / "file_1").iterdir()] == ["original.png"]  # no temp left
    await blobs.delete("file_1/original.png")
    await blobs.delete("file_1/original.png")  # a missing blob is not an error
    for missing in ("file_1/original.png", "nothing/here"):
        with pytest.raises(BlobNotFound):
            await blobs.get(missing)
    (tmp_path / "secret.txt").write_text("outside")
    for bad in ("../secret.txt", "a/../../secret.txt", "/etc/passwd", ".hidden", "a//b", "", "a\\b", "a/.."):
        with pytest.raises(ValueError, match="invalid blob key"):
            await blobs.get(bad)
        with pytest.raises(ValueError):
            await blobs.put(bad, b"x", "text/plain")
    assert (tmp_path / "secret.txt").read_text() == "outside"


def test_open_blobs_picks_the_data_dir_unless_a_bucket_is_set(tmp_path: Path) -> None:
    local = open_blobs(Settings(data_dir=tmp_path))
    assert isinstance(local, LocalBlobs) and local.root == tmp_path / "files"
    s3 = open_blobs(Settings(data_dir=tmp_path, s3_bucket="b", s3_endpoint_url="http://127.0.0.1:9"))
    assert isinstance(s3, S3Blobs) and s3.bucket == "b"


# ---- the store's files tables ----------------------------------------------------------------

def record(file_id: str, owner: str = ALICE, at: float = 1.0, **changes: object) -> FileRecord:
    fields: dict = dict(id=file_id, owner=owner, filename=f"{file_id}.png", media_type="image/png", size=3,
                        source="upload", width=4, height=2, blob_key=f"{file_id}/original.png", created_at=at)
    fields.update(changes)
    return FileRecord(**fields)


async def test_store_files_and_links(tmp_path: Path) -> None:
    async with SqliteStore(tmp_path / "chat.db") as store:
        await store.apply([CreateConversation(ALICE, "c1", 1.0), CreateConversation(BOB, "cb", 1.0),
                           AddFile(record("f1", at=5.0), "c1"), AddFile(record("f2", width=None, height=None)),
                           AddFile(record("fb", owner=BOB))])
        assert await store.get_file(ALICE, "f1") == record("f1", at=5.0)
        assert await store.get_file(BOB, "f1") is None
        await store.apply([AttachFile(ALICE, "c1", "f2", 2.0),
                           AttachFile(ALICE, "c1", "f1", 9.0),  # already attached: keeps its place
                           AttachFile(ALICE, "c1", "fb", 3.0),  # Bob's file
                           AttachFile(ALICE, "cb", "f2", 3.0),  # Bob's conversation
                           AttachFile(ALICE, "missing", "f2", 3.0), AttachFile(ALICE, "c1", "nope", 3.0)])
        assert [f.id for f in await store.conversation_files(ALICE, "c1")] == ["f2", "f1"]
        assert await store.conversation_files(BOB, "c1") == []
        assert await store.conversation_files(BOB, "cb") == []
        with pytest.raises(ConstraintError):
            await store.apply([AddFile(record("f1"))])  # ids are generated: a repeat is a bug
        with pytest.raises(ConstraintError):
            await store.apply([AddFile(record("f9", source="download"))])
        # Deleting the conversation deletes its links, not the owner's files.
        await store.apply([DeleteConversation(ALICE, "c1")])
        assert await store.get_file(ALICE, "f1") == record("f1", at=5.0)
    with sqlite3.connect(tmp_path / "chat.db") as db:
        assert db.execute("SELECT COUNT(*) FROM conversation_files").fetchone() == (0,)


async def test_a_batch_orders_file_links_with_their_conversation(tmp_path: Path) -> None:
    async with SqliteStore(tmp_path / "chat.db") as store:
        await store.apply([CreateConversation(ALICE, "c0", 1.0), AddFile(record("old"))])
        # An attach that planning could move early, then a new conversation, its files, a
        # deleted conversation's file: each link must land after what it depends on.
        await store.apply([AttachFile(ALICE, "c0", "old", 1.0), CreateConversation(ALICE, "c1", 1.0),
                           AddFile(record("a", at=2.0), "c1"), AddFile(record("b", at=2.0), "c1"),
                           AttachFile(ALICE, "c1", "old", 2.0),
                           DeleteConversation(ALICE, "c0"), AddFile(record("late"), "c0")])
        assert [f.id for f in await store.conversation_files(ALICE, "c1")] == ["a", "b", "old"]
        assert await store.conversation_files(ALICE, "c0") == []
        assert await store.get_file(ALICE, "late") is not None
    assert op_scope(AddFile(record("x"), "c1")) == "c1"
    assert op_scope(AddFile(record("x"))) == "file:x"
    assert op_scope(AttachFile(ALICE, "c1", "x", 1.0)) == "c1"
    many = [AddFile(record(f"f{n}"), f"c{n}") for n in range(50)]
    assert [len(rows) for _, rows in plan(many)] == [50, 50]


async def test_a_version_2_database_gains_the_files_tables(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "old.db"
    with monkeypatch.context() as old:  # this build as it was before the files migration
        old.setattr(schema, "MIGRATIONS", schema.MIGRATIONS[:2])
        old.setattr(schema, "SCHEMA_VERSION", 2)
        old.setattr(sqlite_store, "_ANY_PENDING", "SELECT 1 WHERE 0")  # nor its search index's queue
        async with SqliteStore(path) as store:
            await store.apply([CreateConversation(ALICE, "c1", 1.0)])
    async with SqliteStore(path) as store:
        await store.apply([AddFile(record("f1"), "c1")])
        assert [f.id for f in await store.conversation_files(ALICE, "c1")] == ["f1"]
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT version FROM schema_version").fetchall() == [
            (n,) for n in range(1, schema.SCHEMA_VERSION + 1)]


# ---- Files -----------------------------------------------------------------------------------

@pytest.fixture
async def files(db, tmp_path: Path) -> Files:
    store, writer = db
    await store.apply([CreateConversation(ALICE, "c1", 1.0), CreateConversation(ALICE, "c2", 1.0),
                       CreateConversation(BOB, "cb", 1.0)])
    return Files(store, writer, LocalBlobs(tmp_path / "blobs"), max_bytes=100_000)


def blob_count(tmp_path: Path) -> int:
    root = tmp_path / "blobs"
    return sum(1 for p in root.rglob("*") if p.is_file()) if root.exists() else 0


async def test_save_and_read_back(files: Files, tmp_path: Path) -> None:
    png = image("PNG", (40, 30))
    saved = await files.save(ALICE, png, "holiday.png")
    assert saved.id.startswith("file_") and len(saved.id) == 29
    assert (saved.owner, saved.filename, saved.media_type, saved.size, saved.source) == (
        ALICE, "holiday.png", "image/png", len(png), "upload")
    assert (saved.width, saved.height, saved.is_image, saved.extension) == (40, 30, True, ".png")
    assert await files.get(ALICE, saved.id) == saved
    assert await files.read(ALICE, saved.id) == (saved, png)
    assert (tmp_path / "blobs" / saved.id / "original.png").read_bytes() == png
    doc = await files.save(ALICE, word_document(), "notes.docx", source="attachment")
    assert (doc.media_type, doc.extension, doc.width, doc.is_image, doc.source) == (
        DOCX, ".docx", None, False, "attachment")
    # Another owner's file does not exist for them.
    assert await files.get(BOB, saved.id) is None
    for call in (files.read(BOB, saved.id), files.read(ALICE, "file_" + "0" * 24),
                 files.attach(BOB, "cb", saved.id), files.read_derived(BOB, saved.id, "x")):
        with pytest.raises(FileError) as caught:
            await call
        assert caught.value.code == "not_found"


async def test_save_refuses_before_storing_anything(files: Files, tmp_path: Path) -> None:
    cases = [(b"x" * 100_001, "big.txt", "too_large"),
             (b"a text file\n", "cat.png", "unsupported_type"),
             (png_header(100_000, 100_000), "bomb.png", "too_large"),
             (b"\xff\xd8\xff" + bytes(50), "broken.jpg", "unsupported_type"),
             (png_header(0, 10), "empty.png", "unsupported_type")]
    for data, name, code in cases:
        with pytest.raises(FileError) as caught:
            await files.save(ALICE, data, name, conversation_id="c1")
        assert caught.value.code == code, (name, caught.value.message)
    assert blob_count(tmp_path) == 0
    assert await files.in_conversation(ALICE, "c1") == []
    with pytest.raises(ValueError, match="source"):
        await files.save(ALICE, b"x", "a.txt", source="download")
    assert (await files.save(ALICE, b"x" * 100_000, "exactly.txt")).size == 100_000


async def test_conversations_list_their_files_in_order(files: Files) -> None:
    upload = await files.save(ALICE, b"an upload", "a.txt")
    photo = await files.save(ALICE, image("JPEG"), "photo.jpg", source="attachment", conversation_id="c1")
    await files.attach(ALICE, "c1", upload.id)
    await files.attach(ALICE, "c1", photo.id)  # again: keeps its place
    await files.attach(ALICE, "c2", upload.id)  # one file, two conversations
    await files.attach(ALICE, "cb", upload.id)  # Bob's conversation: nothing happens
    assert [f.id for f in await files.in_conversation(ALICE, "c1")] == [photo.id, upload.id]
    assert [f.id for f in await files.in_conversation(ALICE, "c2")] == [upload.id]
    assert await files.in_conversation(BOB, "cb") == []
    assert await files.in_conversation(BOB, "c1") == []
    # Saves in a burst are committed together and each is readable once save returns.
    burst = await asyncio.gather(*(files.save(ALICE, f"note {n}".encode(), f"n{n}.md", conversation_id="c2")
                                   for n in range(20)))
    listed = await files.in_conversation(ALICE, "c2")
    assert {f.id for f in listed} == {upload.id, *(f.id for f in burst)}
    assert all(f.media_type == "text/markdown" for f in burst)


async def test_conversation_files_as_tools_see_them(files: Files) -> None:
    scoped = files.scoped(ALICE, "c1")
    generated = await scoped.save(image("PNG"), "made.png", source="generated")
    written = await scoped.save(b"x,y\n1,2\n", "out.csv", source="code")
    gif = await scoped.save(image("GIF"), "anim.gif", source="code")
    assert [f.id for f in await scoped.images()] == [generated.id, gif.id]
    assert [f.id for f in await scoped.documents()] == [written.id]
    assert (await scoped.read(written.id))[1] == b"x,y\n1,2\n"
    assert scoped.url(generated) == f"/api/uploads/{generated.id}"
    assert await files.scoped(ALICE, "c2").images() == []
    with pytest.raises(FileError):
        await files.scoped(BOB, "cb").read(generated.id)


async def test_derived_blobs_live_beside_their_file(files: Files, tmp_path: Path) -> None:
    saved = await files.save(ALICE, b"# Doc\n", "doc.md")
    assert await files.read_derived(ALICE, saved.id, "parsed.json") is None
    await files.write_derived(ALICE, saved.id, "parsed.json", b'{"parts": []}')
    assert await files.read_derived(ALICE, saved.id, "parsed.json") == b'{"parts": []}'
    assert (tmp_path / "blobs" / saved.id / "derived" / "parsed.json").exists()
    for bad in ("../original.md", "a/b", ".hidden", ""):
        with pytest.raises(ValueError):
            await files.write_derived(ALICE, saved.id, bad, b"x")
    with pytest.raises(FileError):
        await files.write_derived(BOB, saved.id, "parsed.json", b"x")


async def test_a_lost_blob_is_not_found(files: Files, tmp_path: Path) -> None:
    saved = await files.save(ALICE, b"soon gone", "a.txt")
    (tmp_path / "blobs" / saved.key).unlink()
    with pytest.raises(FileError, match="missing from storage"):
        await files.read(ALICE, saved.id)


async def test_file_names_are_cleaned(files: Files) -> None:
    assert clean_filename("../../etc/passwd.txt") == "passwd.txt"
    assert clean_filename("C:\\fakepath\\photo.png") == "photo.png"
    assert clean_filename("evil\u202egnp.exe\n") == "evilgnp.exe"  # no bidi override
    assert clean_filename("") == clean_filename(None) == clean_filename("///") == "file"
    long = clean_filename("x" * 500 + ".pdf")
    assert len(long) == 200 and long.endswith(".pdf")
    saved = await files.save(ALICE, b"hello", "/tmp/../../x/\u0007bell.md")
    assert saved.filename == "bell.md" and saved.media_type == "text/markdown"
    # A lone surrogate cannot be stored: it is repaired (U+FFFD) as everywhere text enters.
    assert clean_filename("notes\ud800.md") == "notes\ufffd.md"
    saved = await files.save(ALICE, b"hello", "caf\udce9.md")
    assert saved.filename == "caf\ufffd.md" and (await files.get(ALICE, saved.id)).filename == "caf\ufffd.md"


def test_urls_and_open_files(db, tmp_path: Path) -> None:
    store, writer = db
    file = StoredFile("file_" + "a" * 24, ALICE, "a.png", "image/png", 3, 1.0, "upload", 1, 1,
                      key="file_" + "a" * 24 + "/original.png")
    local = open_files(Settings(data_dir=tmp_path, s3_public_base_url="https://cdn.example"), store, writer)
    assert local.url(file) == f"/api/uploads/{file.id}"  # a public base means nothing without a bucket
    assert isinstance(local.blobs, LocalBlobs) and local.max_bytes == Settings().upload_max_bytes
    public = Files(store, writer, local.blobs, max_bytes=1, public_base_url="https://pub.example.r2.dev/")
    assert public.url(file) == f"https://pub.example.r2.dev/{file.key}"


# ---- over HTTP: what the end-to-end tests leave out ------------------------------------------

def raw_exchange(server, head: str, chunks: Iterator[bytes] = iter(()), timeout: float = 10.0) -> tuple[bytes, int]:
    """Sends a request head, then body chunks until the server answers (or they run out),
    and returns the server's whole reply and how many body bytes went out. A server that
    answers before the body is done is a server that did not wait for it."""
    sent = 0
    with socket.create_connection(("127.0.0.1", server.port), timeout=timeout) as sock:
        sock.sendall(head.replace("\n", "\r\n").encode() + b"\r\n")
        for chunk in chunks:
            if select.select([sock], [], [], 0)[0]:
                break
            try:
                sock.sendall(chunk)
            except (BrokenPipeError, ConnectionResetError):
                break
            sent += len(chunk)
        reply = b""
        while b"\r\n\r\n" not in reply or len(reply) < reply.find(b"\r\n\r\n") + 4 + _length(reply):
            data = sock.recv(65536)
            if not data:
                break
            reply += data
    return reply, sent


def _length(reply: bytes) -> int:
    for line in reply.split(b"\r\n\r\n", 1)[0].split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value)
    return 0


def test_a_body_over_the_limit_is_refused_as_it_arrives(make_server) -> None:
    server = make_server(CHAT_AGENT_UPLOAD_MAX_BYTES="1000")
    head = ("POST /api/uploads HTTP/1.1\nHost: 127.0.0.1\nContent-Type: multipart/form-data; boundary=xyz\n")
    # Declared too large: answered at once, without a byte of the body.
    reply, _ = raw_exchange(server, head + "Content-Length: 1000000000\n")
    assert reply.startswith(b"HTTP/1.1 413") and b'"too_large"' in reply
    # Chunked, with no length to go by: cut off once past the limit, the body never finished.
    part = b"--xyz\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.txt\"\r\n\r\n"

    def chunks() -> Iterator[bytes]:
        for n in range(2_000):  # up to 16 MB, far more than the server may take
            data = (part if n == 0 else b"") + b"x" * 8192
            yield b"%x\r\n%s\r\n" % (len(data), data)

    reply, sent = raw_exchange(server, head + "Transfer-Encoding: chunked\n", chunks())
    assert reply.startswith(b"HTTP/1.1 413") and b'"too_large"' in reply
    assert sent < 2_000 * 8192
    # The server carries on.
    ok = httpx.post(f"{server.http_url}/api/uploads", files={"file": ("a.txt", b"small", "text/plain")})
    assert ok.status_code == 201


def test_malformed_uploads_are_400(server) -> None:
    url = f"{server.http_url}/api/uploads"
    cases = {
        "two files": dict(files=[("file", ("a.txt", b"a")), ("file", ("b.txt", b"b"))]),
        "text, not a file": dict(data={"file": "just a string"}, files={"other": ("x.txt", b"x")}),
        "JSON": dict(json={"file": "aGVsbG8="}),
        "no boundary": dict(content=b"--x\r\n", headers={"Content-Type": "multipart/form-data"}),
        "broken": dict(content=b"garbage without boundaries",
                       headers={"Content-Type": "multipart/form-data; boundary=b"}),
    }
    for what, request in cases.items():
        response = httpx.post(url, **request)
        assert response.status_code == 400, (what, response.text)
        assert response.json()["error"]["code"] == "invalid_upload", what


def test_downloads_are_served_safely(server) -> None:
    url = f"{server.http_url}/api/uploads"
    name = "résumé; v2.md"
    upload = httpx.post(url, files={"file": (name, "# Me\n".encode(), "application/octet-stream")}).json()
    got = httpx.get(f"{url}/{upload['uploadId']}")
    assert got.status_code == 200 and got.content == "# Me\n".encode()
    assert got.headers["content-type"] == "text/markdown; charset=utf-8"
    assert got.headers["content-length"] == str(len("# Me\n".encode()))
    assert got.headers["x-content-type-options"] == "nosniff"
    assert got.headers["cache-control"].startswith("private")
    assert got.headers["content-disposition"] == (
        "attachment; filename=\"r_sum_; v2.md\"; filename*=UTF-8''r%C3%A9sum%C3%A9%3B%20v2.md")
    photo = httpx.post(url, files={"file": ("p.gif", image("GIF"), "image/gif")}).json()
    got = httpx.get(f"{url}/{photo['uploadId']}")
    assert got.headers["content-type"] == "image/gif"
    assert got.headers["content-disposition"].startswith("inline;")
    unsupported = httpx.post(url, files={"file": ("a.pdf", zip_of({"a": b"x"}), "application/pdf")})
    assert unsupported.status_code == 415
    assert unsupported.json()["error"]["code"] == "unsupported_type"
    assert "ZIP archive" in unsupported.json()["error"]["message"]

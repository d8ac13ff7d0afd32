"""Attached documents: real files parsed by the real child process, hostile ones included.

Every file is made here: PDFs written byte by byte (text objects in a Helvetica page
stream), DOCX files by python-docx, zip bombs by hand (a deflate segment repeated, so a
3 GiB member costs 3 MB and no time). The child is observed through /proc: its limits,
its environment, and that it is gone after a timeout or a cancellation.
"""

from __future__ import annotations

import asyncio
import importlib.util
import io
import os
import random
import re
import resource
import struct
import time
import zlib
from pathlib import Path

import pypdf
import pytest

from tests import pace
from tests.cancelling import cancel_within
from tests.samples import long_pdf, make_docx, make_pdf
from chat_agent.files.documents import (DocumentError, ParsedDocument, parse_document, read_parts,
                                  render_for_model, search)

PDF, TXT, MD, CSV = "application/pdf", "text/plain", "text/markdown", "text/csv"
DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"


# ---- making files ----

def encrypted_pdf(**how) -> bytes:
    writer = pypdf.PdfWriter(clone_from=pypdf.PdfReader(io.BytesIO(make_pdf([["Top secret plans."]]))))
    writer.encrypt(algorithm="RC4-128", **how)
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def aes_pdf() -> bytes:
    """An owner-password-only PDF that says its streams are AES (they are RC4: nobody who
    lacks the cryptography package gets as far as noticing)."""
    data = encrypted_pdf(user_password="", owner_password="owner")
    aes = b"/V 4\n/R 4\n/CF << /StdCF << /CFM /AESV2 /Length 16 >> >> /StmF /StdCF /StrF /StdCF\n"
    data = data.replace(b"/V 2\n/R 3\n", aes)
    return re.sub(rb"startxref\n(\d+)", lambda m: b"startxref\n%d" % (int(m[1]) + len(aes) - 10), data)


def hand_zip(files: dict[str, tuple[bytes, int, int]]) -> bytes:
    """A zip written by hand: name → (raw deflate data, CRC-32, size it declares inflated)."""
    out, central = bytearray(), bytearray()
    for name, (data, crc, size) in files.items():
        raw = name.encode()
        central += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, 8, 0, 0x21, crc, len(data),
                               size, len(raw), 0, 0, 0, 0, 0, len(out)) + raw
        out += struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, 8, 0, 0x21, crc, len(data), size, len(raw), 0)
        out += raw + data
    end = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, len(files), len(files), len(central), len(out), 0)
    return bytes(out + central + end)


def deflated(data: bytes) -> tuple[bytes, int, int]:
    c = zlib.compressobj(6, zlib.DEFLATED, -15)
    return c.compress(data) + c.flush(), zlib.crc32(data), len(data)


def repeated(prefix: bytes, chunk: bytes, count: int, suffix: bytes, *, crc: bool = True,
             wbits: int = -15) -> tuple[bytes, int, int]:
    """prefix + chunk × count + suffix, deflated cheaply: after a full flush the compressor
    starts afresh, so the chunk's segment is the same bytes every time and can be repeated.
    (With wbits=15, zlib's format, the closing Adler-32 is wrong: nobody gets that far.)"""
    c = zlib.compressobj(9, zlib.DEFLATED, wbits)
    head = c.compress(prefix) + c.flush(zlib.Z_FULL_FLUSH)
    body = c.compress(chunk) + c.flush(zlib.Z_FULL_FLUSH)
    tail = c.compress(suffix) + c.flush()
    checksum = 0
    if crc:
        checksum = zlib.crc32(prefix)
        for _ in range(count):
            checksum = zlib.crc32(chunk, checksum)
        checksum = zlib.crc32(suffix, checksum)
    return head + body * count + tail, checksum, len(prefix) + len(chunk) * count + len(suffix)


_TYPES = (b'<?xml version="1.0" encoding="UTF-8"?><Types xmlns="http://schemas.openxmlformats.org/package/'
          b'2006/content-types"><Default Extension="rels" ContentType="application/vnd.openxmlformats-'
          b'package.relationships+xml"/><Override PartName="/word/document.xml" ContentType="application/'
          b'vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml"/></Types>')
_RELS = (b'<?xml version="1.0" encoding="UTF-8"?><Relationships xmlns="http://schemas.openxmlformats.org/'
         b'package/2006/relationships"><Relationship Id="rId1" Type="http://schemas.openxmlformats.org/'
         b'officeDocument/2006/relationships/officeDocument" Target="word/document.xml"/></Relationships>')
_BODY = (b'<?xml version="1.0" encoding="UTF-8"?><w:document xmlns:w="http://schemas.openxmlformats.org/'
         b'wordprocessingml/2006/main"><w:body>', b"</w:body></w:document>")


def docx_with_body(member: tuple[bytes, int, int]) -> bytes:
    return hand_zip({"[Content_Types].xml": deflated(_TYPES), "_rels/.rels": deflated(_RELS),
                     "word/document.xml": member})


async def parse(data: bytes, media_type: str, filename: str, **limits) -> ParsedDocument:
    return await parse_document(data, media_type, filename, **limits)


def parser_children() -> list[int]:
    """Our own children running chat_agent.docparse (found after exec, so their limits are set)."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            command = Path(f"/proc/{entry}/cmdline").read_bytes()
        except (OSError, ValueError):
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == os.getpid() and b"chat_agent.files.docparse" in command:
            found.append(int(entry))
    return found


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@pytest.fixture(scope="module")
def big() -> ParsedDocument:
    return asyncio.run(parse_document(long_pdf(), PDF, "annual report.pdf"))


# ---- PDF ----

async def test_pdf_pages_come_back_in_order_and_small_ones_are_shown_whole():
    doc = await parse(make_pdf([["Alpha page one."], ["Beta page (two)."], []]), PDF, "three.pdf")
    assert (doc.unit, doc.media_type, doc.filename, doc.truncated) == ("page", PDF, "three.pdf", False)
    assert doc.parts == ["Alpha page one.", "Beta page (two).", ""]  # the blank page keeps its number
    assert doc.chars == len("Alpha page one.Beta page (two).")
    shown = render_for_model(doc)
    assert shown.startswith('<document filename="three.pdf">') and shown.endswith("</document>")
    assert "--- Page 2 of 3 ---\nBeta page (two)." in shown
    assert read_parts(doc, "3") == "--- Page 3 of 3 ---\n(This page has no text.)"
    assert ParsedDocument.from_json(doc.to_json()) == doc


async def test_owner_password_only_opens_and_a_user_password_refuses():
    doc = await parse(encrypted_pdf(user_password="", owner_password="owner"), PDF, "locked.pdf")
    assert doc.parts == ["Top secret plans."]
    with pytest.raises(DocumentError, match=r'^Could not read "secret.pdf": it is password-protected\.$'):
        await parse(encrypted_pdf(user_password="hunter2"), PDF, "secret.pdf")


@pytest.mark.skipif(importlib.util.find_spec("cryptography") is not None, reason="AES can be read here")
async def test_an_aes_pdf_without_the_cryptography_package_says_so():
    with pytest.raises(DocumentError, match="encrypted with a method this server cannot open"):
        await parse(aes_pdf(), PDF, "aes.pdf")


@pytest.mark.parametrize("data", [
    pytest.param(b"%PDF-1.4\n1 0 obj\n<< /Type /Catalog /Pa", id="cut-short"),
    pytest.param(make_pdf([["whole"]])[:200], id="first-200-bytes"),
    pytest.param(random.Random(1).randbytes(50_000), id="random-bytes"),
    pytest.param(b"%PDF-1.7\n" + random.Random(2).randbytes(20_000), id="header-then-noise"),
])
async def test_damaged_pdfs_are_a_document_error(data):
    with pytest.raises(DocumentError, match=r'^Could not read "x.pdf": the file is damaged or is not a PDF\.$'):
        await parse(data, PDF, "x.pdf")


async def test_a_pdf_page_that_inflates_to_gigabytes_costs_only_that_page():
    data, _, size = repeated(b"BT /F1 11 Tf 72 720 Td (boom) Tj ET\n", b" " * 2**20, 3 * 1024, b"",
                              crc=False, wbits=15)
    bomb = b"<< /Length %d /Filter /FlateDecode >>\nstream\n%s\nendstream" % (len(data), data)
    before, start = peak_rss_mb(), time.perf_counter()
    doc = await parse(make_pdf([["Before the bomb."], bomb, ["After the bomb."]]), PDF, "bomb.pdf")
    assert size > 3e9 and len(bomb) < 4_000_000
    assert doc.parts == ["Before the bomb.", "[This page could not be read.]", "After the bomb."]
    assert time.perf_counter() - start < pace.scaled(3) and peak_rss_mb() - before < 50


def test_a_500_page_pdf_is_described_briefly_and_read_by_page(big):
    assert len(big.parts) == 500 and big.chars > 60_000
    described = render_for_model(big)
    assert len(described) <= 1_500
    for fact in ('"annual report.pdf"', "PDF", "500 pages", f"{big.chars:,} characters",
                 "Report page 1.", "analyze_document"):
        assert fact in described
    page = read_parts(big, "250")
    assert page.startswith("--- Page 250 of 500 ---\nReport page 250.") and "page 251" not in page
    many = read_parts(big, "1, 4,7-9")
    assert [line for line in many.splitlines() if line.startswith("---")] == [
        f"--- Page {n} of 500 ---" for n in (1, 4, 7, 8, 9)]


def test_search_finds_a_word_on_page_377(big):
    found = search(big, "XYLOPHONE budget")
    assert found.startswith('1 match for \'XYLOPHONE budget\' in "annual report.pdf", on page 377.')
    assert "[page 377] " in found and "**xylophone budget**" in found
    assert search(big, "flamingo").startswith("No matches for 'flamingo'")
    capped = search(big, "committee", max_hits=5, context=30)
    assert capped.startswith("500 matches") and capped.count("\n[page ") == 5 and len(capped) < 1_500


def test_reading_out_of_range_or_too_much_is_a_clear_error(big):
    for spec, message in [("501", 'Page 501 does not exist: "annual report.pdf" has 500 pages.'),
                          ("0", "'0' is not a valid range of pages."),
                          ("9-3", "'9-3' is not a valid range of pages."),
                          ("seven", "is not a page number or range"),
                          ("1-21", "read at most 20 at a time"),
                          ("1-15,100-110", "read at most 20 at a time")]:
        with pytest.raises(DocumentError, match=re.escape(message)):
            read_parts(big, spec)
    with pytest.raises(DocumentError, match="query is empty"):
        search(big, "  ")


def test_reading_stops_at_the_character_limit_and_says_what_is_left():
    doc = ParsedDocument(filename="a.txt", media_type=TXT, unit="section", parts=["a" * 20_000, "b" * 20_000, "c"])
    text = read_parts(doc, "1-3")
    assert text.startswith(f"--- Section 1 of 3 ---\n{'a' * 20_000}\n\n--- Section 2 of 3 ---\n{'b' * 10_000}\n")
    assert text.endswith("[Stopped here: 30,000 characters reached. Search the document for text later "
                         "in this section; ask for '3' next.]")


async def test_max_chars_truncates_with_a_note_and_stops_reading():
    doc = await parse(long_pdf(50), PDF, "long.pdf", max_chars=1_000)
    assert doc.truncated and len(doc.parts) < 50
    assert doc.parts[-1].endswith("[Truncated: the document is longer than 1,000 characters; the rest was not read.]")
    assert "cut short" in render_for_model(doc, inline_limit=500)
    text = await parse(("word " * 3_000).encode(), TXT, "w.txt", max_chars=5_000)
    assert text.truncated and text.chars < 5_200


# ---- DOCX ----

def _report(document) -> None:
    document.add_heading("Quarterly report", 0)
    document.add_paragraph("This quarter went well.")
    document.add_heading("Sales", 1)
    table = document.add_table(rows=3, cols=2)
    for row, cells in zip(table.rows, [("Region", "Revenue"), ("North", "10 | 12"), ("South", "7")]):
        for cell, text in zip(row.cells, cells):
            cell.text = text
    document.add_paragraph("Keep the northern office open.", style="List Bullet")
    document.add_heading("Outlook", 2)
    document.add_paragraph("Steady.")


async def test_docx_headings_paragraphs_lists_and_tables():
    doc = await parse(make_docx(_report), DOCX, "report.docx")
    assert (doc.unit, doc.media_type) == ("section", DOCX)
    assert doc.parts == ["# Quarterly report\n\nThis quarter went well.\n\n# Sales\n\n"
                         "| Region | Revenue |\n| --- | --- |\n| North | 10 \\| 12 |\n| South | 7 |\n\n"
                         "- Keep the northern office open.\n\n## Outlook\n\nSteady."]


async def test_docx_headings_start_sections_once_they_have_substance():
    def chapters(document):
        for n in range(1, 4):
            document.add_heading(f"Chapter {n}", 1)
            for _ in range(3):
                document.add_paragraph(f"Chapter {n} says something worth reading. " * 12)
    doc = await parse(make_docx(chapters), DOCX, "book.docx")
    assert [part.splitlines()[0] for part in doc.parts] == ["# Chapter 1", "# Chapter 2", "# Chapter 3"]
    assert search(doc, "chapter 2 says").count("[section 2]") >= 1


async def test_merged_table_cells_are_not_repeated():
    def merged(document):
        table = document.add_table(rows=2, cols=3)
        table.cell(0, 0).merge(table.cell(0, 2)).text = "Wide header"
        for cell, text in zip(table.rows[1].cells, "abc"):
            cell.text = text
    doc = await parse(make_docx(merged), DOCX, "m.docx")
    assert doc.parts == ["| Wide header |\n| --- |\n| a | b | c |"]


async def test_docx_text_inside_links_and_tracked_changes_counts_but_deleted_text_does_not():
    def tracked(document):
        from docx.oxml import parse_xml
        from docx.oxml.ns import nsdecls
        document.element.body.insert(0, parse_xml(
            f"<w:p {nsdecls('w')}><w:pPr><w:tabs><w:tab w:val='left' w:pos='720'/></w:tabs></w:pPr>"
            "<w:r><w:t xml:space='preserve'>Kept </w:t></w:r><w:ins w:id='1' w:author='a'><w:r><w:t>added</w:t>"
            "</w:r></w:ins><w:del w:id='2' w:author='a'><w:r><w:delText>gone</w:delText></w:r></w:del>"
            "<w:r><w:tab/><w:t>after a tab</w:t></w:r></w:p>"))
    doc = await parse(make_docx(tracked), DOCX, "tracked.docx")
    assert doc.parts == ["Kept added\tafter a tab"]


async def test_a_docx_zip_bomb_is_refused_quickly_without_touching_our_memory():
    bomb = docx_with_body(repeated(_BODY[0], b" " * 2**20, 3 * 1024, _BODY[1], crc=False))
    assert len(bomb) < 4_000_000  # 3 GiB inside
    before, start = peak_rss_mb(), time.perf_counter()
    with pytest.raises(DocumentError, match=r'"bomb.docx": it expands to more than 300 MB when unzipped\.$'):
        await parse(bomb, DOCX, "bomb.docx")
    assert time.perf_counter() - start < pace.scaled(3)
    assert peak_rss_mb() - before < 50


async def test_a_docx_that_lies_about_its_size_reads_as_damaged():
    member, _, _ = repeated(_BODY[0], b" " * 2**20, 1024, _BODY[1], crc=False)
    with pytest.raises(DocumentError, match="damaged or is not a Word document"):
        await parse(docx_with_body((member, 0, 10_000)), DOCX, "liar.docx")


async def test_a_docx_that_fits_the_zip_limit_but_not_memory_is_stopped_by_the_memory_limit():
    paragraph = b"<w:p><w:r><w:t>x</w:t></w:r></w:p>"
    heavy = docx_with_body(repeated(_BODY[0], paragraph * 30_000, 240, _BODY[1]))  # 250 MB of XML
    before, start = peak_rss_mb(), time.perf_counter()
    with pytest.raises(DocumentError, match='"heavy.docx": it needs more memory to parse than this server allows'):
        await parse(heavy, DOCX, "heavy.docx", memory_mb=400)
    assert time.perf_counter() - start < pace.scaled(8)
    assert peak_rss_mb() - before < 50


@pytest.mark.parametrize("data", [make_pdf([["not a docx"]]), hand_zip({"a.txt": deflated(b"hi")}), b"PK\x03\x04junk"])
async def test_things_that_are_not_docx_files(data):
    with pytest.raises(DocumentError, match="damaged or is not a Word document"):
        await parse(data, DOCX, "fake.docx")


# ---- text, Markdown, CSV ----

async def test_markdown_splits_at_headings_and_keeps_code_fences_whole():
    intro = "Intro paragraph. " * 70  # a section with substance, so the next heading starts one
    text = f"# Guide\n\n{intro}\n\n## Setup\nRun this:\n\n```sh\n# not a heading\n\necho hi\n```\n\n## Use\nDone."
    doc = await parse(text.encode(), MD, "guide.md")
    assert doc.parts == [f"# Guide\n\n{intro.strip()}",
                         "## Setup\n\nRun this:\n\n```sh\n# not a heading\n\necho hi\n```\n\n## Use\n\nDone."]


async def test_long_plain_text_is_chunked_on_paragraph_boundaries():
    paragraphs = [f"Paragraph {n}. " + "Words fill the page. " * 30 for n in range(60)]
    doc = await parse("\r\n\r\n".join(paragraphs).encode(), TXT, "long.txt")
    assert len(doc.parts) > 8 and all(len(p) <= 4_000 for p in doc.parts)
    assert [p.strip() for part in doc.parts for p in part.split("\n\n")] == [p.strip() for p in paragraphs]
    one_line = await parse(("x" * 9_000 + " " + "y" * 100).encode(), TXT, "line.txt")
    assert all(len(p) <= 4_000 for p in one_line.parts) and "".join(one_line.parts) == "x" * 9_000 + " " + "y" * 100


@pytest.mark.parametrize("data, expected", [
    ("\ufeffcafé au lait".encode(), "café au lait"),
    (b"\x1b[1;31mERROR\x1b[0m disk full", "ERROR disk full"),
    ("café au lait".encode("cp1252"), "café au lait"),
    ("naïve résumé".encode("utf-16"), "naïve résumé"),
])
async def test_text_encodings(data, expected):
    assert (await parse(data, TXT, "t.txt")).parts == [expected]


@pytest.mark.parametrize("data", [random.Random(3).randbytes(4_096), b"ELF\x00\x01\x02" * 500, b"   \n\n  "])
async def test_binary_or_empty_text_is_refused(data):
    with pytest.raises(DocumentError, match=r'^Could not read "t.txt": it (is not UTF-8 text|does not look '
                                            r'like text|contains no text)'):
        await parse(data, TXT, "t.txt")


async def test_csv_rows_in_chunks_each_with_the_header():
    rows = ["id;name;note", *(f'{n};Item {n};"says ""hi""; twice\nover two lines"' for n in range(1, 301))]
    doc = await parse("\n".join(rows).encode(), "application/vnd.ms-excel", "items.csv")
    assert doc.media_type == CSV and len(doc.parts) > 3
    for part in doc.parts:
        assert part.splitlines()[1:3] == ["| id | name | note |", "| --- | --- | --- |"]
    spans = [tuple(map(int, re.match(r"Rows (\d+)-(\d+) \(row 1 is the header\):", p).groups())) for p in doc.parts]
    assert spans[0][0] == 2 and spans[-1][1] == 301  # CSV records: the quoted newlines do not count
    assert all(end + 1 == start for (_, end), (start, _) in zip(spans, spans[1:]))
    assert '| 1 | Item 1 | says "hi"; twice over two lines |' in doc.parts[0]
    assert "| 300 | Item 300 |" in doc.parts[-1]


async def test_types_are_checked_before_any_process_starts():
    with pytest.raises(DocumentError, match=r'^"photo.png" is of a type that cannot be read here \(image/png\)'):
        await parse(b"\x89PNG", "image/png", "photo.png")
    with pytest.raises(DocumentError, match="the file is empty"):
        await parse(b"", PDF, "empty.pdf")
    notes = await parse(b"# Notes\n\nhi", "application/octet-stream", "notes.md")
    assert notes.media_type == MD
    with pytest.raises(DocumentError, match="stored document is not valid"):
        ParsedDocument.from_json('{"filename": "a", "media_type": "text/plain", "unit": "chapter", "parts": []}')


# ---- the child: limits, environment, timeout, cancellation ----

async def test_a_child_that_dies_is_reported_not_raised():
    with pytest.raises(DocumentError, match=r'"a.txt": the parser ran out of memory \(over 8 MB\) or crashed\.$'):
        await parse(b"hello", TXT, "a.txt", memory_mb=8)  # too little for Python to start


async def test_a_timeout_kills_the_child():
    start = time.perf_counter()
    with pytest.raises(DocumentError, match=r'"slow.pdf": it took longer than 0.01 seconds to parse\.$'):
        await parse(long_pdf(), PDF, "slow.pdf", timeout=0.01)
    assert time.perf_counter() - start < pace.scaled(1) and parser_children() == []


async def test_cancelling_kills_the_child_at_once_and_it_ran_limited_without_secrets(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-must-not-leak")
    task = asyncio.create_task(parse(long_pdf(2_000), PDF, "huge.pdf", memory_mb=512, timeout=30))
    deadline = time.monotonic() + 5
    while not (children := parser_children()) and time.monotonic() < deadline:
        await asyncio.sleep(0.005)
    assert len(children) == 1
    pid = children[0]
    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    assert sorted(v.split(b"=")[0] for v in environ if v) == [b"LC_ALL", b"PATH", b"PYTHONPATH"]
    limits = {line[:26].strip(): line[26:].split()[:2] for line in Path(f"/proc/{pid}/limits").read_text().splitlines()}
    assert limits["Max address space"] == [str(512 * 2**20)] * 2
    assert limits["Max cpu time"] == ["30", "31"] and limits["Max processes"] == ["1", "1"]
    assert limits["Max file size"] == limits["Max core file size"] == ["0", "0"]
    await cancel_within(task, 0.5)
    assert not Path(f"/proc/{pid}").exists()

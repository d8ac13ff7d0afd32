"""The child process that parses one uploaded document: `python -m chat_agent.docparse KIND MAX_CHARS`.

The document's bytes arrive on stdin; one JSON object leaves on stdout, either
`{"ok": true, "unit": "page" | "section", "parts": [...], "truncated": bool}` or
`{"ok": false, "error": "<a reason a user may read>"}`. The parent (`chat_agent.documents`)
starts it with resource limits and a minimal environment, and kills it on a timeout, so
the code here may assume nothing about its input: any failure becomes an error reply, and
whatever kills it outright (memory, CPU time) the parent reports.

KIND is one of pdf, docx, text, markdown, html, csv, tsv. Parsers import their library lazily,
so a text file never pays for pypdf or lxml.
"""

from __future__ import annotations

import io
import json
import logging
import re
import resource
import sys
import warnings
from functools import partial
from itertools import chain
from typing import Callable, Iterable, Iterator

TARGET_CHARS = 4_000  # the size a section of a text, DOCX or CSV file aims at
MIN_SECTION = 1_000  # a heading starts a new section once the current one has this much
MAX_UNZIPPED = 300 * 2**20  # a DOCX must not declare more than this, all its parts inflated
MAX_ZIP_ENTRIES = 5_000

_HEADING = re.compile(r"^ {0,3}#{1,6}(\s|$)")
_FENCE = re.compile(r"^ {0,3}(```|~~~)")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0e-\x1f\x7f]")
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")  # colour codes in a saved terminal log
_NO_MEMORY = "it needs more memory to parse than this server allows"
_NOT_TEXT = "it does not look like text (it contains binary data)"
_DAMAGED = {"pdf": "the file is damaged or is not a PDF",
            "docx": "the file is damaged or is not a Word document (.docx)"}


class Unreadable(Exception):
    """A reason the document cannot be read, worded for the user."""


Blocks = Iterable[tuple[bool, str]]  # (is_heading, text) in reading order


# ---- shared: cleaning, budget, packing blocks into sections ----

def _clean(text: str) -> str:
    text = text.encode("utf-8", "replace").decode("utf-8")  # lone surrogates from odd fonts
    return _CONTROL.sub("", text.replace("\r\n", "\n").replace("\r", "\n"))


def _note(max_chars: int) -> str:
    return f"[Truncated: the document is longer than {max_chars:,} characters; the rest was not read.]"


def _capped(parts: Iterable[str], max_chars: int) -> tuple[list[str], bool]:
    """Take parts until `max_chars`; the part that crosses the line is cut and ends with a note.
    Lazy: a PDF's later pages are never extracted."""
    kept, left = [], max_chars
    for part in parts:
        if len(part) > left:
            kept.append(f"{part[:left].rstrip()}\n\n{_note(max_chars)}")
            return kept, True
        kept.append(part)
        left -= len(part)
    return kept, False


def _split_long(text: str, limit: int) -> Iterator[str]:
    """Cut a block longer than `limit` on line breaks, and a line longer than that on spaces."""
    piece = ""
    for line in text.split("\n"):
        while len(line) > limit:
            cut = line.rfind(" ", limit // 2, limit)
            cut = cut if cut > 0 else limit
            if piece:
                yield piece
                piece = ""
            yield line[:cut]
            line = line[cut:].lstrip(" ")
        if piece and len(piece) + 1 + len(line) > limit:
            yield piece
            piece = line
        else:
            piece = f"{piece}\n{line}" if piece else line
    if piece:
        yield piece


def _pack(blocks: Blocks, target: int = TARGET_CHARS) -> Iterator[str]:
    """Join blocks into sections of about `target` characters. A heading opens a new section
    once the current one is substantial, and never ends one: it moves on with its text."""
    current: list[str] = []
    size, last_heading = 0, False
    for heading, text in blocks:
        for i, piece in enumerate(_split_long(text, target)):
            is_heading = heading and i == 0
            if current and ((is_heading and size >= MIN_SECTION) or size + len(piece) > target):
                carried = [current.pop()] if last_heading and len(current) > 1 else []
                yield "\n\n".join(current)
                current, size = carried, sum(len(c) + 2 for c in carried)
            current.append(piece)
            size += len(piece) + 2
            last_heading = is_heading
    if current:
        yield "\n\n".join(current)


# ---- text, Markdown, CSV ----

def _decode(data: bytes) -> str:
    """UTF-8 (a BOM allowed), UTF-16 with its BOM, else Windows-1252; refused if it then
    holds a NUL or more than 1% control characters (terminal colours aside)."""
    utf16 = data.startswith((b"\xff\xfe", b"\xfe\xff"))
    for encoding in ["utf-16"] if utf16 else ["utf-8-sig", "cp1252"]:
        try:
            text = _ANSI.sub("", data.decode(encoding))
        except UnicodeDecodeError:
            continue
        if "\x00" in text or len(_CONTROL.findall(text)) * 100 > len(text):
            raise Unreadable(_NOT_TEXT)
        return _clean(text)
    raise Unreadable(_NOT_TEXT if utf16 else "it is not UTF-8 text")


def _text_blocks(text: str) -> Iterator[tuple[bool, str]]:
    """Paragraphs split on blank lines, Markdown headings as their own blocks, fenced code
    kept whole."""
    lines: list[str] = []
    fence: str | None = None
    for line in text.split("\n"):
        if fence is None and _HEADING.match(line):
            if lines:
                yield False, "\n".join(lines).strip("\n")
            lines = []
            yield True, line.strip()
            continue
        if fence is None and not line.strip():
            if lines:
                yield False, "\n".join(lines).strip("\n")
            lines = []
            continue
        if match := _FENCE.match(line):
            fence = None if fence == match.group(1) else (fence or match.group(1))
        lines.append(line.rstrip())
    if lines:
        yield False, "\n".join(lines).strip("\n")


def parse_text(data: bytes, max_chars: int) -> tuple[str, list[str], bool]:
    text = _decode(data)
    truncated = len(text) > max_chars
    parts = list(_pack(_text_blocks(text[:max_chars])))
    if truncated and parts:
        parts[-1] += f"\n\n{_note(max_chars)}"
    return "section", parts, truncated


def _cell(value: str) -> str:
    return " ".join(value.split()).replace("|", "\\|")


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(_cell(c) for c in cells) + " |"


def _csv_sections(text: str, delimiter: str) -> Iterator[str]:
    import csv

    rows = ((n, row) for n, row in enumerate(csv.reader(io.StringIO(text), delimiter=delimiter), 1)
            if any(c.strip() for c in row))
    first = next(rows, None)
    if first is None:
        return
    header = _row(first[1]) + "\n" + _row(["---"] * len(first[1]))
    batch: list[tuple[int, str]] = []
    size, sections = len(header), 0
    for n, row in chain(rows, [(0, [])]):
        line = _row(row) if row else ""
        if batch and (not row or size + len(line) > TARGET_CHARS):
            span = f"Rows {batch[0][0]}-{batch[-1][0]} (row {first[0]} is the header):"
            yield "\n".join([span, header, *(r for _, r in batch)])
            batch, size, sections = [], len(header), sections + 1
        if row:
            batch.append((n, line))
            size += len(line) + 1
    if not sections:
        yield header  # a header row only


def parse_csv(data: bytes, max_chars: int, delimiter: str | None = None) -> tuple[str, list[str], bool]:
    import csv

    text = _decode(data)
    if delimiter is None:
        head = next((line for line in text.split("\n") if line.strip()), "")
        delimiter = max(",;\t|", key=head.count)
    try:
        parts, truncated = _capped(_csv_sections(text, delimiter), max_chars)
    except csv.Error as exc:
        raise Unreadable(f"it is not valid CSV ({exc})") from None
    return "section", parts, truncated


# ---- PDF ----

_PAGE_FAILED = "[This page could not be read.]"


def _page_text(page) -> str:
    from pypdf.errors import DependencyError

    try:
        return _clean(page.extract_text() or "").strip()
    except (MemoryError, DependencyError):
        raise
    except Exception:  # one bad page (a decompression limit, a broken font) spoils only itself
        return _PAGE_FAILED


def parse_pdf(data: bytes, max_chars: int) -> tuple[str, list[str], bool]:
    from pypdf import PdfReader
    from pypdf.errors import DependencyError

    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted and not reader.decrypt(""):
            raise Unreadable("it is password-protected")
        parts, truncated = _capped((_page_text(page) for page in reader.pages), max_chars)
    except (DependencyError, NotImplementedError):  # AES needs the cryptography package
        raise Unreadable("it is encrypted with a method this server cannot open") from None
    if parts and all(part == _PAGE_FAILED for part in parts):
        raise Unreadable(_DAMAGED["pdf"])
    return "page", parts, truncated


# ---- DOCX ----

def _read_member(self, name, pwd=None) -> bytes:
    """ZipFile.read, 1 MiB at a time: the stock one inflates up to 1 GiB in one call whatever
    the member declares, so a member that lies about its size would get that far."""
    with self.open(name, "r", pwd) as member:
        return b"".join(iter(partial(member.read, 2**20), b""))


def _check_zip(data: bytes) -> None:
    """Refuse a zip that declares too much; make a member that lies stop at what it declared
    (where its CRC check fails)."""
    import zipfile

    zipfile.ZipFile.read = _read_member  # this process parses one file: patching is safe here
    try:
        entries = zipfile.ZipFile(io.BytesIO(data)).infolist()
    except zipfile.BadZipFile:
        raise Unreadable(_DAMAGED["docx"]) from None
    if len(entries) > MAX_ZIP_ENTRIES:
        raise Unreadable(f"it holds more than {MAX_ZIP_ENTRIES:,} files")
    if sum(e.file_size for e in entries) > MAX_UNZIPPED:
        raise Unreadable(f"it expands to more than {MAX_UNZIPPED // 2**20} MB when unzipped")


_W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
_RUN_TEXT = {f"{_W}t": None, f"{_W}tab": "\t", f"{_W}br": "\n", f"{_W}cr": "\n"}


def _paragraph_text(p) -> str:
    """The text of a w:p: every run's, whatever wraps it (hyperlinks, fields, tracked
    insertions, inline content controls), deleted text left out. python-docx's own reads
    only direct runs and hyperlinks, through an XPath query per paragraph."""
    out = []
    for node in p.iter(*_RUN_TEXT):
        if node.getparent().tag == f"{_W}r":  # a w:tab in the paragraph's properties is a tab stop
            out.append(node.text or "" if node.tag == f"{_W}t" else _RUN_TEXT[node.tag])
    return _clean("".join(out)).strip()


def _paragraph_block(p, styles: dict[str, str]) -> tuple[bool, str] | None:
    text = _paragraph_text(p)
    if not text:
        return None
    name = styles.get(p.style or "", "")  # p.style is the style id; names are what Word shows
    if name == "Title":
        return True, f"# {text}"
    if level := re.fullmatch(r"Heading ([1-9])", name):
        return True, "#" * min(int(level.group(1)), 6) + " " + text
    if name.startswith("List") or (p.pPr is not None and p.pPr.numPr is not None):
        return False, f"- {text}"
    return False, text


def _table_block(tbl) -> tuple[bool, str] | None:
    """A w:tbl as rows of cells; a merged cell is one w:tc, so it comes once."""
    rows = [[" ".join(_paragraph_text(p) for p in tc.iter(f"{_W}p")) for tc in tr.iterchildren(f"{_W}tc")]
            for tr in tbl.iterchildren(f"{_W}tr")]
    if not rows:
        return None
    lines = [_row(cells) for cells in rows]
    if len(lines) > 1:
        lines.insert(1, _row(["---"] * len(rows[0])))
    return False, "\n".join(lines)


def _docx_blocks(element, styles: dict[str, str]) -> Iterator[tuple[bool, str]]:
    for child in element.iterchildren():
        if child.tag == f"{_W}p":
            block = _paragraph_block(child, styles)
        elif child.tag == f"{_W}tbl":
            block = _table_block(child)
        elif child.tag == f"{_W}sdt" and (content := child.find(f"{_W}sdtContent")) is not None:
            yield from _docx_blocks(content, styles)  # a content control: its blocks count
            continue
        else:
            continue
        if block is not None:
            yield block


def parse_docx(data: bytes, max_chars: int) -> tuple[str, list[str], bool]:
    import docx

    _check_zip(data)
    try:
        document = docx.Document(io.BytesIO(data))
    except (KeyError, ValueError):  # no [Content_Types].xml, or another kind of Office file
        raise Unreadable(_DAMAGED["docx"]) from None
    styles = {style.style_id: style.name or "" for style in document.styles}
    parts, truncated = _capped(_pack(_docx_blocks(document.element.body, styles)), max_chars)
    return "section", parts, truncated


# ---- HTML ----

_HTML_BLOCKS = {"p", "li", "pre", "blockquote", "dt", "dd", "figcaption", "caption", "tr", "address"}
_HTML_SKIPPED = {"script", "style", "noscript", "template", "head", "nav", "svg"}


def _html_blocks(root) -> Iterator[tuple[bool, str]]:
    """Headings (h1-h6, as Markdown headings) and block elements in reading order; text
    outside any block (a bare div's) counts as a paragraph of its own."""
    loose: list[str] = []

    def flush() -> Iterator[tuple[bool, str]]:
        text = _clean(" ".join(" ".join(loose).split()))
        loose.clear()
        if text:
            yield False, text

    def walk(element) -> Iterator[tuple[bool, str]]:
        tag = element.tag if isinstance(element.tag, str) else ""
        if tag in _HTML_SKIPPED:
            return
        if re.fullmatch(r"h[1-6]", tag) or tag in _HTML_BLOCKS:
            yield from flush()
            if tag == "pre":
                text = _clean(element.text_content()).strip("\n")
            else:
                text = _clean(" ".join(element.text_content().split()))
            if text:
                yield (True, "#" * int(tag[1]) + " " + text) if tag[0] == "h" and tag != "tr" else (False, text)
            return
        if element.text:
            loose.append(element.text)
        for child in element:
            yield from walk(child)
            if child.tail:
                loose.append(child.tail)

    yield from walk(root)
    yield from flush()


def parse_html(data: bytes, max_chars: int) -> tuple[str, list[str], bool]:
    import lxml.html

    text = _decode(data)
    try:
        root = lxml.html.document_fromstring(text)
    except Exception:
        raise Unreadable("it is not an HTML page that can be read") from None
    parts, truncated = _capped(_pack(_html_blocks(root)), max_chars)
    return "section", parts, truncated


PARSERS: dict[str, Callable[[bytes, int], tuple[str, list[str], bool]]] = {
    "pdf": parse_pdf, "docx": parse_docx, "text": parse_text, "markdown": parse_text, "html": parse_html,
    "csv": parse_csv, "tsv": lambda data, max_chars: parse_csv(data, max_chars, "\t"),
}


def parse(kind: str, data: bytes, max_chars: int) -> dict:
    """The reply for one document: never raises, whatever the bytes."""
    try:
        unit, parts, truncated = PARSERS[kind](data, max_chars)
        if not any(p.strip() for p in parts):
            raise Unreadable("no text could be extracted from it (a scanned PDF has none)"
                             if kind == "pdf" else "it contains no text")
        return {"ok": True, "unit": unit, "parts": parts, "truncated": truncated}
    except Unreadable as exc:
        return {"ok": False, "error": str(exc)}
    except MemoryError:
        return {"ok": False, "error": _NO_MEMORY}
    except RecursionError:
        return {"ok": False, "error": "its structure is nested too deeply to parse"}
    except Exception as exc:  # a library's own error on a hostile file: the reason stays generic
        if _near_memory_limit() or "memory" in str(exc).lower():
            return {"ok": False, "error": _NO_MEMORY}
        return {"ok": False, "error": _DAMAGED.get(kind, "the file is damaged")}


def _near_memory_limit() -> bool:
    """Whether this process came close to its address-space limit: libxml2, out of memory,
    reports only an 'unknown error'."""
    limit = resource.getrlimit(resource.RLIMIT_AS)[0]
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return limit != resource.RLIM_INFINITY and peak > 0.6 * limit


def main() -> None:
    logging.disable(logging.CRITICAL)  # pypdf logs every oddity of a damaged file
    warnings.simplefilter("ignore")
    kind, max_chars = sys.argv[1], int(sys.argv[2])
    reply = parse(kind, sys.stdin.buffer.read(), max_chars)
    sys.stdout.buffer.write(json.dumps(reply, ensure_ascii=False).encode("utf-8"))
    sys.stdout.buffer.flush()


if __name__ == "__main__":
    main()

"""Attached documents: parse them in a child process, show them to the model, read them on demand.

`parse_document` hands the bytes to `python -m chat_agent.docparse` under resource limits
(address space, CPU time, no file writes, no new processes), with a minimal environment
and a wall-clock timeout; cancelling the awaiting task kills it. Whatever a file does to
the parser, the caller gets a `ParsedDocument` or a `DocumentError` whose message a client
may be shown. The rest is pure functions over a `ParsedDocument`: `render_for_model`
(the whole text when small, a description when large), `read_parts` and `search` (what the
model's analyze_document tool does with a large one).
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import re
import resource
import signal
import subprocess
import sys
from contextlib import suppress
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Literal

__all__ = ["DocumentError", "ParsedDocument", "parse_document", "render_for_model", "read_parts",
           "search", "MEDIA_TYPES"]

DOCX_TYPE = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
MEDIA_TYPES = {"pdf": "application/pdf", "docx": DOCX_TYPE, "text": "text/plain",
               "markdown": "text/markdown", "csv": "text/csv", "tsv": "text/tab-separated-values",
               "html": "text/html"}
_BY_TYPE = {**{v: k for k, v in MEDIA_TYPES.items()}, "text/x-markdown": "markdown",
            "application/csv": "csv", "text/x-csv": "csv"}
_BY_EXTENSION = {".pdf": "pdf", ".docx": "docx", ".txt": "text", ".text": "text", ".md": "markdown",
                 ".markdown": "markdown", ".csv": "csv", ".tsv": "tsv", ".html": "html", ".htm": "html"}
# what browsers send when they do not know, or call a CSV a spreadsheet: trust the extension
_VAGUE_TYPES = {"", "application/octet-stream", "binary/octet-stream", "application/vnd.ms-excel"}
_LABELS = {"pdf": "PDF", "docx": "Word document", "text": "text file", "markdown": "Markdown file", "html": "web page",
           "csv": "CSV file", "tsv": "TSV file"}
_PACKAGE_ROOT = str(Path(__file__).resolve().parent.parent)
MAX_READ_PARTS = 20  # per read_parts call
MAX_READ_CHARS = 30_000  # per read_parts call: under the tool registry's output cap
EXCERPT_CHARS = 300


class DocumentError(ValueError):
    """A document that cannot be parsed or read as asked; the message is safe to show a client."""


@dataclass(frozen=True, slots=True)
class ParsedDocument:
    filename: str
    media_type: str
    unit: Literal["page", "section"]
    parts: list[str]  # pages of a PDF; sections of anything else
    truncated: bool = False  # the text stopped at max_chars (the last part says so)

    @property
    def chars(self) -> int:
        return sum(len(part) for part in self.parts)

    def to_json(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str) -> ParsedDocument:
        try:
            data = json.loads(text)
            doc = cls(filename=data["filename"], media_type=data["media_type"], unit=data["unit"],
                      parts=data["parts"], truncated=data.get("truncated", False))
        except (ValueError, TypeError, KeyError):
            doc = None
        if doc is None or not (isinstance(doc.filename, str) and isinstance(doc.media_type, str)
                               and _valid_text(doc.unit, doc.parts, doc.truncated)):
            raise DocumentError("The stored document is not valid.")
        return doc


def _valid_text(unit: object, parts: object, truncated: object) -> bool:
    return (unit in ("page", "section") and isinstance(truncated, bool) and isinstance(parts, list)
            and all(isinstance(part, str) for part in parts))


# ---- parsing, in a child process ----

def _kind(media_type: str, filename: str) -> str:
    declared = media_type.split(";")[0].strip().lower()
    extension = _BY_EXTENSION.get(Path(filename).suffix.lower())
    if extension is not None and (declared in _VAGUE_TYPES or (
            declared == "text/plain" and extension in ("markdown", "csv", "tsv", "html"))):
        return extension
    if declared in _BY_TYPE:
        return _BY_TYPE[declared]
    raise DocumentError(f"{_quoted(filename)} is of a type that cannot be read here "
                        f"({media_type or 'unknown'}); attach a PDF, DOCX, TXT, MD or CSV file.")


def _quoted(filename: str) -> str:
    name = " ".join(filename.split()) or "document"
    return f'"{name[:97]}..."' if len(name) > 100 else f'"{name}"'


def _limit(memory_mb: int, cpu_seconds: int) -> None:
    """Runs in the child between fork and exec: only `resource` calls, no import, no lock."""
    resource.setrlimit(resource.RLIMIT_AS, (memory_mb * 2**20, memory_mb * 2**20))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds + 1))
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    # Counted per user, so in effect "no new processes" (root is exempt: the kill is by group).
    resource.setrlimit(resource.RLIMIT_NPROC, (1, 1))


def _child_env() -> dict[str, str]:
    """No secrets: only what Python needs to find this package."""
    return {"PATH": os.defpath, "LC_ALL": "C.UTF-8", "PYTHONPATH": _PACKAGE_ROOT}


async def _run_child(kind: str, data: bytes, *, timeout: float, memory_mb: int,
                     max_chars: int) -> tuple[int, bytes]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-B", "-P", "-s", "-m", "chat_agent.files.docparse", kind, str(max_chars),
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL, env=_child_env(), start_new_session=True,
        preexec_fn=partial(_limit, memory_mb, max(1, math.ceil(timeout))))
    try:
        async with asyncio.timeout(timeout):
            out, _ = await proc.communicate(data)
        return proc.returncode or 0, out
    finally:
        if proc.returncode is None:  # timed out or cancelled: not a moment longer
            with suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()


async def parse_document(data: bytes, media_type: str, filename: str, *, timeout: float = 20.0,
                         memory_mb: int = 768, max_chars: int = 5_000_000) -> ParsedDocument:
    """Parse an uploaded PDF, DOCX, TXT, MD or CSV file. Raises DocumentError, whatever the bytes."""
    kind = _kind(media_type, filename)
    failed = f"Could not read {_quoted(filename)}:"
    if not data:
        raise DocumentError(f"{failed} the file is empty.")
    try:
        code, out = await _run_child(kind, data, timeout=timeout, memory_mb=memory_mb,
                                     max_chars=max_chars)
    except TimeoutError:
        raise DocumentError(f"{failed} it took longer than {timeout:g} seconds to parse.") from None
    except (OSError, subprocess.SubprocessError):
        raise DocumentError(f"{failed} the server could not start its parser; try again later.") from None
    if code == -signal.SIGXCPU:
        raise DocumentError(f"{failed} it took longer than {timeout:g} seconds to parse.")
    reply = _reply(out)
    if reply is None:
        raise DocumentError(f"{failed} the parser ran out of memory (over {memory_mb} MB) or crashed.")
    if not reply["ok"]:
        raise DocumentError(f"{failed} {reply['error']}.")
    return ParsedDocument(filename=filename, media_type=MEDIA_TYPES[kind], unit=reply["unit"],
                          parts=reply["parts"], truncated=reply["truncated"])


def _reply(out: bytes) -> dict | None:
    """The child's reply if it is whole and well formed; None if it died on the way."""
    try:
        reply = json.loads(out)
    except ValueError:
        return None
    if not isinstance(reply, dict):
        return None
    if reply.get("ok") is False and isinstance(reply.get("error"), str):
        return reply
    if reply.get("ok") is True and _valid_text(reply.get("unit"), reply.get("parts"), reply.get("truncated")):
        return reply
    return None


# ---- what the model sees, and its reading tools ----

def _noun(doc: ParsedDocument, count: int) -> str:
    return f"{count:,} {doc.unit}{'' if count == 1 else 's'}"


def _header(doc: ParsedDocument, number: int) -> str:
    return f"--- {doc.unit.capitalize()} {number} of {len(doc.parts)} ---"


def _label(doc: ParsedDocument) -> str:
    kind = _BY_TYPE.get(doc.media_type)
    return _LABELS[kind] if kind else doc.media_type


def render_for_model(doc: ParsedDocument, *, inline_limit: int = 30_000) -> str:
    """The whole document if it has at most `inline_limit` characters; else a paragraph that
    describes it and says how to read it with the analyze_document tool."""
    name = json.dumps(doc.filename, ensure_ascii=False)
    if doc.chars <= inline_limit:
        if len(doc.parts) == 1:
            body = doc.parts[0]
        else:
            body = "\n\n".join(f"{_header(doc, n)}\n{part}" for n, part in enumerate(doc.parts, 1))
        return f"<document filename={name}>\n{body}\n</document>"
    start = " ".join(" ".join(doc.parts[:3]).split())
    excerpt = start[:EXCERPT_CHARS] + ("…" if len(start) > EXCERPT_CHARS else "")
    cut = " It was cut short at that length; the rest of the file was not read." if doc.truncated else ""
    return (f"The user attached {_quoted(doc.filename)} ({_label(doc)}, {_noun(doc, len(doc.parts))}, "
            f"{doc.chars:,} characters), too long to include here.{cut} It begins: \"{excerpt}\" "
            f"Read it with the analyze_document tool: ask for {doc.unit}s by number (\"3\", \"3-5\" or "
            f"\"1,4,7-9\", up to {MAX_READ_PARTS} at a time) or search it for a word or phrase.")


def _numbers(doc: ParsedDocument, spec: str, max_parts: int) -> list[int]:
    numbers: list[int] = []
    for item in spec.replace(" ", "").split(","):
        match = re.fullmatch(r"(\d{1,9})(?:[-–](\d{1,9}))?", item)
        if match is None:
            raise DocumentError(f"{spec!r} is not a {doc.unit} number or range: write it like "
                                f"\"3\", \"3-5\" or \"1,4,7-9\".")
        first, last = int(match[1]), int(match[2] or match[1])
        if first < 1 or last < first:
            raise DocumentError(f"{item!r} is not a valid range of {doc.unit}s.")
        if last > len(doc.parts):
            raise DocumentError(f"{doc.unit.capitalize()} {last} does not exist: "
                                f"{_quoted(doc.filename)} has {_noun(doc, len(doc.parts))}.")
        if last - first + 1 > max_parts:
            raise DocumentError(f"That asks for too many {doc.unit}s; read at most {max_parts} at a time.")
        numbers += [n for n in range(first, last + 1) if n not in numbers]
        if len(numbers) > max_parts:
            raise DocumentError(f"That asks for too many {doc.unit}s; read at most {max_parts} at a time.")
    return numbers


def read_parts(doc: ParsedDocument, spec: str, *, max_parts: int = MAX_READ_PARTS,
               max_chars: int = MAX_READ_CHARS) -> str:
    """The text of pages or sections like "3", "3-5" or "1,4,7-9" (1-based), each under a header.
    Stops at `max_chars` and says where to go on."""
    numbers = _numbers(doc, spec, max_parts)
    out: list[str] = []
    left = max_chars
    for i, n in enumerate(numbers):
        text = doc.parts[n - 1] or f"(This {doc.unit} has no text.)"
        if len(text) > left:
            rest = ",".join(str(m) for m in numbers[i + 1:])
            more = f"; ask for {rest!r} next" if rest else ""
            out.append(f"{_header(doc, n)}\n{text[:left]}\n[Stopped here: {max_chars:,} characters "
                       f"reached. Search the document for text later in this {doc.unit}{more}.]")
            break
        out.append(f"{_header(doc, n)}\n{text}")
        left -= len(text)
    return "\n\n".join(out)


def search(doc: ParsedDocument, query: str, *, max_hits: int = 20, context: int = 200) -> str:
    """Case-insensitive search; any run of whitespace in the query matches any other (PDF text
    breaks lines anywhere). Each hit shows its part number and `context` characters around it."""
    words = query.split()
    if not words:
        raise DocumentError("The search query is empty.")
    pattern = re.compile(r"\s+".join(re.escape(w) for w in words), re.IGNORECASE)
    hits: list[str] = []
    total, parts_hit = 0, []
    for n, part in enumerate(doc.parts, 1):
        shown_to = -1
        for match in pattern.finditer(part):
            total += 1
            if not parts_hit or parts_hit[-1] != n:
                parts_hit.append(n)
            if len(hits) < max_hits and match.start() >= shown_to:
                start, end = max(0, match.start() - context), min(len(part), match.end() + context)
                snippet = (part[start:match.start()] + "**" + match.group() + "**"
                           + part[match.end():end])
                hits.append(f"[{doc.unit} {n}] {'…' if start else ''}{' '.join(snippet.split())}"
                            f"{'…' if end < len(part) else ''}")
                shown_to = end
    if not total:
        return f"No matches for {query!r} in {_quoted(doc.filename)} ({_noun(doc, len(doc.parts))} searched)."
    where = ", ".join(map(str, parts_hit[:50])) + (", …" if len(parts_hit) > 50 else "")
    plural = "s" if len(parts_hit) > 1 else ""
    head = (f"{total:,} match{'es' if total != 1 else ''} for {query!r} in {_quoted(doc.filename)}, "
            f"on {doc.unit}{plural} {where}. Showing {len(hits)}:")
    return "\n\n".join([head, *hits])

"""A parsed document (pages of a PDF, sections of anything else) into chunks of about
`TARGET` characters, cut at paragraph breaks where it can, each remembering its page and the
heading it falls under: what a search returns and a citation points at."""

from __future__ import annotations

import re
from collections.abc import Iterator

from chat_agent.files.documents import ParsedDocument
from chat_agent.knowledge.records import Chunk

TARGET = 1_000  # characters a chunk aims at: a few paragraphs, enough to quote, small enough to rank
MAX = 1_600  # a paragraph longer than this is cut at sentence ends, then at spaces
_HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*\S)\s*$")
_SENTENCE = re.compile(r"(?<=[.!?])\s+")


def _paragraphs(text: str) -> Iterator[str]:
    for block in re.split(r"\n\s*\n", text):
        block = block.strip()
        if not block:
            continue
        if len(block) <= MAX:
            yield block
            continue
        piece = ""
        for sentence in _SENTENCE.split(block):
            while len(sentence) > MAX:
                cut = sentence.rfind(" ", MAX // 2, MAX)
                cut = cut if cut > 0 else MAX
                if piece:
                    yield piece
                    piece = ""
                yield sentence[:cut].strip()
                sentence = sentence[cut:].strip()
            if piece and len(piece) + 1 + len(sentence) > TARGET:
                yield piece
                piece = sentence
            else:
                piece = f"{piece} {sentence}" if piece else sentence
        if piece:
            yield piece


def _lines_as_blocks(text: str) -> str:
    """A heading line is a paragraph of its own, even without blank lines around it."""
    return "\n".join(f"\n{line}\n" if _HEADING.match(line) else line for line in text.split("\n"))


def chunk_document(doc: ParsedDocument) -> list[Chunk]:
    chunks: list[Chunk] = []
    heading = ""
    for number, part in enumerate(doc.parts, 1):
        page = number if doc.unit == "page" else None
        current: list[str] = []
        size = 0
        under = heading  # the heading the chunk being built falls under

        def flush() -> None:
            nonlocal current, size
            if current:
                chunks.append(Chunk(ord=len(chunks), text="\n\n".join(current), page=page, heading=under))
            current, size = [], 0

        for paragraph in _paragraphs(_lines_as_blocks(part)):
            match = _HEADING.match(paragraph) if "\n" not in paragraph else None
            if match:
                if size >= TARGET // 3:
                    flush()  # a heading starts a new chunk once the current one has substance
                heading = match.group(2).strip()
                if not current:
                    under = heading
                current.append(paragraph)
                size += len(paragraph)
                continue
            if current and size + len(paragraph) > TARGET:
                flush()
                under = heading
            if not current:
                under = heading
            current.append(paragraph)
            size += len(paragraph) + 2
        flush()
    return chunks

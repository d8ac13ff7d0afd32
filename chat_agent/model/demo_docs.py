"""What the offline demo model reads of attached documents, and how it answers from them.

A document reaches a model as a text block of the user's message (chat_agent.files.attachments):
`[document file_…]` then the whole text in `<document filename="…">…</document>`, or, when
it is too long, a paragraph saying so and how to read it with analyze_document. The demo
reads what a real model is shown, nothing more, and answers with the document's own
sentences: the ones that share the most words with the question, or its opening for a
summary. Pure functions, no I/O.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

_HEADER = re.compile(r"^\[document (?P<id>file_\w+)\]\n", re.MULTILINE)
_WHOLE = re.compile(r'<document filename=(?P<name>"(?:[^"\\]|\\.)*")>\n(?P<text>.*?)\n</document>', re.DOTALL)
_LONG = re.compile(r'The user attached "(?P<name>[^\n]*?)" \([^\n]*?(?P<count>[\d,]+) (?P<unit>page|section)s?, '
                   r"[\d,]+ characters\), too long to include here")
_PART_HEADER = re.compile(r"^--- (?:Page|Section) \d+ of \d+ ---$", re.MULTILINE)
_STOP = frozenset("a an and are about as at be by can does did do for from has have how i in is it its me "
                  "of on or please say says tell that the this to was what when where which who why will with "
                  "you your document file attached text summarize summary summarise quote".split())


@dataclass(frozen=True, slots=True)
class Attached:
    """A document as the model was shown it: its text, or only its size when it is too long
    (then `text` is None and it is read with analyze_document)."""

    name: str
    file_id: str | None
    text: str | None
    parts: int = 1


def attached(content: Any) -> list[Attached]:
    """The documents attached to one user message, in order."""
    found: list[Attached] = []
    for block in content if isinstance(content, list) else []:
        text = block.get("text", "") if isinstance(block, dict) and block.get("type") == "text" else ""
        header = _HEADER.match(text)
        file_id = header["id"] if header else None
        if (whole := _WHOLE.search(text)) is not None and whole.start() == (header.end() if header else 0):
            pieces = [piece.strip() for piece in _PART_HEADER.split(whole["text"])]
            found.append(Attached(json.loads(whole["name"]), file_id, "\n\n".join(p for p in pieces if p),
                                  max(1, len(pieces) - 1)))
        elif header and (long := _LONG.search(text)) is not None:
            found.append(Attached(long["name"], file_id, None, int(long["count"].replace(",", ""))))
    return found


def is_document_block(block: Any) -> bool:
    """A text block that carries an attachment, not the user's words."""
    text = block.get("text", "") if isinstance(block, dict) and block.get("type") == "text" else ""
    return text.startswith(("[document ", "<document ", "[image "))


def sentences(text: str) -> list[str]:
    flat = " ".join(text.split())
    return [s.strip() for s in re.split(r"(?<=[.!?])\s+(?=[\"“(\[A-Z0-9#*-])|\s+(?=#+ )", flat) if s.strip()]


def _terms(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z0-9][a-z0-9'-]+", text.lower()) if w not in _STOP and len(w) > 2}


def best_sentences(text: str, ask: str, n: int = 2) -> list[str]:
    """The sentences sharing the most words with `ask`, in the document's order; none when no
    sentence shares any."""
    wanted = _terms(ask)
    scored = [(len(wanted & _terms(s)), i, s) for i, s in enumerate(sentences(text))]
    top = sorted((x for x in scored if x[0] > 0), key=lambda x: (-x[0], x[1]))[:n]
    return [s for _, _, s in sorted(top, key=lambda x: x[1])]


def _shown(sentence: str, limit: int = 300) -> str:
    return sentence if len(sentence) <= limit else sentence[:limit - 1].rstrip() + "…"


def answer(doc: Attached, text: str, ask: str) -> str:
    """A reply to `ask` from `text` (the document's text, or the pages read of it)."""
    words = len(text.split())
    size = f"{doc.parts} {'pages' if doc.parts != 1 else 'page'}, " if doc.parts > 1 else ""
    head = f"**{doc.name}** ({size}{words:,} words)"
    lowered = ask.lower()
    found = [] if any(w in lowered for w in ("summar", "summarise", "about", "overview")) else best_sentences(text, ask)
    if found:
        quoted = "\n".join(f"> {_shown(s)}" for s in found)
        return (f"From {head}, the passage that answers it:\n\n{quoted}\n\n"
                "*The demo model quotes the document's own sentences; a real model reads and reasons.*")
    opening = sentences(text)[:3]
    if not opening:
        return f"{head} has no text I could read."
    points = "\n".join(f"- {_shown(s, 200)}" for s in opening)
    return (f"{head} in short: it opens with\n\n{points}\n\nAsk me about anything in it and I quote the "
            "passage. *The demo model picks sentences; a real model summarizes.*")


def draft_from(doc: Attached, text: str, title: str) -> str:
    """An artifact built from a document: its opening and the lines that matter."""
    lines = sentences(text)
    points = "\n".join(f"- {_shown(s, 200)}" for s in lines[1:6]) or "- (nothing more)"
    return (f"# {title}\n\nFrom *{doc.name}*, drafted by the offline demo model.\n\n## Summary\n\n"
            f"{_shown(lines[0], 400) if lines else '(The document has no text.)'}\n\n## Key points\n\n{points}\n")


def read_spec(doc: Attached, limit: int = 3) -> str:
    """Which pages or sections of a long document the demo reads first."""
    return f"1-{min(limit, doc.parts)}" if doc.parts > 1 else "1"


def search_term(ask: str) -> str | None:
    """The word of a question the demo searches a long document for (its longest): None for
    a summary, which reads the document's start instead."""
    if any(w in ask.lower() for w in ("summar", "overview", "about")):
        return None
    wanted = _terms(ask)
    terms = [w for w in dict.fromkeys(re.findall(r"[a-z0-9][a-z0-9'-]+", ask.lower())) if w in wanted]
    return max(terms, key=len) if terms else None  # the first of the longest


def answer_read(doc: Attached, read: str, ask: str) -> str:
    """A reply from what analyze_document returned: a search's hits as they are (each names
    its page), or the pages read, answered like a whole document."""
    if read.startswith("No matches for "):
        return f"{read} *The demo model searches for one word; try another.*"
    if re.match(r"[\d,]+ match(es)? for ", read):
        head, _, hits = read.partition("\n\n")
        quoted = "\n".join(f"> {_shown(hit)}" for hit in hits.split("\n\n")[:3])
        return f"{head.removesuffix(':').rstrip('.')}.\n\n{quoted}"
    return answer(doc, read, ask)

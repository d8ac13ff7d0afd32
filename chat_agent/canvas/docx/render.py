"""The Word export: Markdown or code rendered into a python-docx Document.

The Markdown goes through markdown-it-py's CommonMark token stream plus GFM tables and
strikethrough, and comes out as real Word structure: built-in heading, list and quote
styles, hyperlinks, tables. Inline runs are written by .inline; styles, links,
numbering and the lxml helpers are in .oxml.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Iterator

import docx
from docx.document import Document
from docx.oxml.ns import qn
from docx.oxml.table import CT_Tbl
from docx.oxml.xmlchemy import BaseOxmlElement
from docx.shared import Twips
from docx.text.paragraph import Paragraph
from markdown_it import MarkdownIt
from markdown_it.token import Token

from chat_agent.canvas.docx.inline import Inline
from chat_agent.canvas.docx.oxml import (DocStyles, Links, Numbering, add_run, qname,
                                         sub_element)

# Characters XML 1.0 cannot hold at all (lxml refuses them): C0 controls but tab, LF,
# CR; lone surrogates; the two non-characters.
_XML_INVALID = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _parser() -> MarkdownIt:
    # CommonMark plus the two GFM extensions people expect. Raw HTML stays literal text:
    # a Word document has no use for it, and it must not vanish silently either.
    return MarkdownIt("commonmark", {"html": False}).enable(["table", "strikethrough"])


def text_docx(title: str, content: str) -> bytes:
    """`title` is already on one line (export's _one_line)."""
    tokens = _parser().parse(_XML_INVALID.sub("", content))
    writer = _DocxWriter(_XML_INVALID.sub("", title))
    if _starts_with_heading(tokens, writer.title):
        writer.title_heading = True  # "# <title>" becomes the Title, not a repeat of it
    elif writer.title:
        writer.add_title()
    writer.render(tokens)
    return writer.save()


def code_docx(title: str, language: str | None, content: str) -> bytes:
    """`title` is already on one line (export's _one_line)."""
    writer = _DocxWriter(_XML_INVALID.sub("", title))
    if writer.title:
        writer.add_title()
    if language and language.strip():
        writer.paragraph("Subtitle").add_run(_XML_INVALID.sub("", language.strip()))
    writer.code_lines(_XML_INVALID.sub("", content))
    return writer.save()


def _starts_with_heading(tokens: list[Token], title: str) -> bool:
    # Canvas documents often open with "# <their title>": do not print the title twice.
    if not title or len(tokens) < 2 or tokens[0].type != "heading_open":
        return False
    return tokens[0].tag == "h1" and tokens[1].content.strip().casefold() == title.casefold()


def _set_properties(doc: Document, title: str) -> None:
    # The template's own say "python-docx" and date from 2013; File > Info shows them.
    props = doc.core_properties
    now = datetime.now(timezone.utc).replace(microsecond=0)
    props.title, props.author, props.comments = title, "chat-agent", ""
    props.created = props.modified = now


@dataclass(slots=True)
class _ListFrame:
    ordered: bool
    num_id: int | None = None  # ordered lists: their own w:num, so numbering restarts
    pending: bool = False  # an item is open and its bullet is not written yet


class _DocxWriter:
    """Folds markdown-it block tokens into a python-docx Document, in order."""

    def __init__(self, title: str) -> None:
        self.title = title
        self.doc: Document = docx.Document()
        _set_properties(self.doc, title)
        self.styles = DocStyles(self.doc)
        self.links = Links(self.doc)
        self._numbers = Numbering(self.doc, self.styles)
        self._sect_pr = self.doc.element.body.sectPr  # new blocks go right before it
        section = self.doc.sections[-1]
        self._text_width = section.page_width - section.left_margin - section.right_margin
        self._frames: list[_ListFrame | str] = []  # open lists and "quote"s, innermost last
        self._current: Paragraph | None = None
        self.title_heading = False  # the next heading is the title itself

    def save(self) -> bytes:
        out = io.BytesIO()
        self.doc.save(out)
        return out.getvalue()

    def add_title(self) -> None:
        self.paragraph("Title").add_run(self.title)

    def paragraph(self, style: str = "Normal", num_id: int | None = None,
                  rule: bool = False) -> Paragraph:
        """A new last paragraph, in a list's numbering or drawn as a horizontal rule."""
        # python-docx's add_paragraph scans the whole body for sectPr on every call,
        # quadratic on a large document; inserting before a held sectPr is constant.
        p = self._sect_pr.makeelement(qn("w:p"))
        self._sect_pr.addprevious(p)
        if style != "Normal" or num_id is not None or rule:
            # Children in schema order: pStyle, numPr, pBdr.
            p_pr = sub_element(p, "w:pPr")
            if style != "Normal":
                sub_element(p_pr, "w:pStyle", val=self.styles.id(style))
            if num_id is not None:
                num_pr = sub_element(p_pr, "w:numPr")
                sub_element(num_pr, "w:ilvl", val="0")
                sub_element(num_pr, "w:numId", val=str(num_id))
            if rule:  # Word's own "horizontal line" is a paragraph's bottom border
                sub_element(sub_element(p_pr, "w:pBdr"), "w:bottom", val="single", sz="6",
                            space="1", color="auto")
        return Paragraph(p, self.doc)

    def render(self, tokens: list[Token]) -> None:
        stream = iter(tokens)
        for token in stream:
            self._flush_pending(token)
            self._block(token, stream)

    def _block(self, token: Token, stream: Iterator[Token]) -> None:
        match token.type:
            case "paragraph_open":
                self._current = self._body_paragraph()
            case "heading_open":
                style = "Title" if self.title_heading else f"Heading {token.tag[1:]}"
                self._current, self.title_heading = self.paragraph(style), False
            case "inline" if self._current is not None:
                self.inline(self._current._p).feed(token.children or [])
            case "paragraph_close" | "heading_close":
                self._current = None
            case "bullet_list_open" | "ordered_list_open":
                self._open_list(token)
            case "bullet_list_close" | "ordered_list_close" | "blockquote_close":
                self._frames.pop()
            case "list_item_open":
                self._innermost_list().pending = True
            case "blockquote_open":
                self._frames.append("quote")
            case "fence" | "code_block":
                self.code_lines(token.content.removesuffix("\n"))
            case "hr":
                self.paragraph(rule=True)
            case "table_open":
                _write_table(self, _collect_table(stream))

    def _open_list(self, token: Token) -> None:
        ordered = token.type == "ordered_list_open"
        frame = _ListFrame(ordered)
        self._frames.append(frame)
        if ordered:
            start = int(token.attrGet("start") or 1)
            frame.num_id = self._numbers.restart(self._list_style(frame), start)

    def _innermost_list(self) -> _ListFrame:
        return next(f for f in reversed(self._frames) if isinstance(f, _ListFrame))

    def _depth(self) -> int:
        return sum(isinstance(f, _ListFrame) for f in self._frames)

    def _list_style(self, frame: _ListFrame, kind: str | None = None) -> str:
        kind = kind or ("List Number" if frame.ordered else "List Bullet")
        level = min(self._depth(), 3)  # the built-in styles stop at 3
        return kind if level == 1 else f"{kind} {level}"

    def _flush_pending(self, token: Token) -> None:
        """Write the bullet of an item whose first child is not a paragraph, or that is
        empty: `token` follows list_item_open, so it is that first child or the close."""
        frames = self._frames
        if frames and isinstance(frames[-1], _ListFrame) and frames[-1].pending:
            if token.type != "paragraph_open":
                self._list_paragraph(frames[-1])

    def _body_paragraph(self) -> Paragraph:
        innermost = self._frames[-1] if self._frames else None
        if isinstance(innermost, _ListFrame):
            if innermost.pending:
                return self._list_paragraph(innermost)
            return self._indent(self.paragraph(self._list_style(innermost, "List Continue")))
        return self.paragraph("Quote" if innermost == "quote" else "Normal")

    def _list_paragraph(self, frame: _ListFrame) -> Paragraph:
        frame.pending = False
        return self._indent(self.paragraph(self._list_style(frame), frame.num_id))

    def _indent(self, paragraph: Paragraph) -> Paragraph:
        # Past level 3 there is no built-in style: keep stepping right by hand.
        depth = self._depth()
        if depth > 3:
            paragraph.paragraph_format.left_indent = Twips(360 * depth)
        return paragraph

    def inline(self, p: BaseOxmlElement) -> Inline:
        """A writer of runs into the paragraph `p`."""
        return Inline(self.styles, self.links, p)

    def code_lines(self, code: str) -> None:
        # A paragraph per line keeps line breaks and blank lines exactly, and each line
        # stays editable in Word; tabs become real tab characters.
        for line in re.split(r"\r\n?|\n", code):
            add_run(self._indent(self.paragraph("Code Block"))._p, line)

    def new_table(self, rows: int, cols: int) -> CT_Tbl:
        if self._sect_pr.getprevious() is not None and (
                self._sect_pr.getprevious().tag == qname("w:tbl")):
            self.paragraph()  # Word would fuse two adjacent tables into one
        tbl = CT_Tbl.new_tbl(rows, cols, self._text_width)
        self._sect_pr.addprevious(tbl)
        tbl.tblPr.style = self.styles.id("Table Grid")
        return tbl


# --- tables --------------------------------------------------------------------------


@dataclass(slots=True)
class _Cell:
    header: bool
    align: str | None
    inline: list[Token] = field(default_factory=list)


def _collect_table(stream: Iterator[Token]) -> list[list[_Cell]]:
    """Consume the tokens up to table_close into rows of cells."""
    rows: list[list[_Cell]] = []
    for token in stream:
        match token.type:
            case "table_close":
                break
            case "tr_open":
                rows.append([])
            case "th_open" | "td_open":
                style = str(token.attrGet("style") or "")
                align = style.removeprefix("text-align:") if style else None
                rows[-1].append(_Cell(token.type == "th_open", align))
            case "inline":
                rows[-1][-1].inline = token.children or []
    return rows


def _write_table(writer: _DocxWriter, rows: list[list[_Cell]]) -> None:
    cols = max((len(row) for row in rows), default=0)
    if not cols:
        return
    # Filled at the XML level: python-docx's cell and alignment accessors re-walk the
    # grid and the schema on every call, seconds on a document with many tables.
    for tr, cells in zip(writer.new_table(len(rows), cols).tr_lst, rows):
        if cells and cells[0].header:
            # Repeat the header row on every page, as Word users expect of a header.
            sub_element(tr.get_or_add_trPr(), "w:tblHeader")
        for tc, spec in zip(tr.tc_lst, cells):
            p = tc.p_lst[0]  # new_tbl gives every cell one empty paragraph
            if spec.align in ("left", "center", "right"):
                sub_element(sub_element(p, "w:pPr"), "w:jc", val=spec.align)
            inline = writer.inline(p)
            inline.marks["bold"] = int(spec.header)
            inline.feed(spec.inline)

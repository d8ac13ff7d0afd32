"""Export an artifact as Markdown, as a source file, or as a Word document.

Pure functions: bytes in memory, no I/O, no web framework, so the HTTP layer only sets
headers. The Word export renders the Markdown (markdown-it-py's CommonMark token stream
plus GFM tables and strikethrough) into real Word structure: built-in heading, list and
quote styles, hyperlinks, tables. It never pastes Markdown markers into the document.
"""

from __future__ import annotations

import functools
import io
import re
import unicodedata
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Iterable, Iterator, Literal

import docx
from docx.document import Document
from docx.enum.style import WD_STYLE_TYPE
from docx.opc.constants import RELATIONSHIP_TYPE as RT
from docx.oxml.ns import qn
from docx.oxml.numbering import CT_Num
from docx.oxml.table import CT_Tbl
from docx.oxml.xmlchemy import BaseOxmlElement
from docx.shared import Pt, RGBColor, Twips
from docx.styles.style import BaseStyle
from docx.text.paragraph import Paragraph
from lxml import etree
from markdown_it import MarkdownIt
from markdown_it.token import Token

__all__ = ["Exported", "ExportError", "export_artifact"]

MARKDOWN_TYPE = "text/markdown; charset=utf-8"
TEXT_TYPE = "text/plain; charset=utf-8"
DOCX_TYPE = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
MONO_FONT = "Courier New"  # in Word everywhere; LibreOffice maps it to Liberation Mono
MAX_STEM = 80

# language (lower case, as the model names it) → file extension
_EXTENSIONS: dict[str, str] = {
    "python": "py", "py": "py", "typescript": "ts", "ts": "ts", "tsx": "tsx",
    "javascript": "js", "js": "js", "jsx": "jsx", "rust": "rs", "rs": "rs",
    "go": "go", "golang": "go", "java": "java", "c": "c", "h": "h", "cpp": "cpp",
    "c++": "cpp", "cxx": "cpp", "csharp": "cs", "c#": "cs", "cs": "cs", "php": "php",
    "ruby": "rb", "rb": "rb", "swift": "swift", "kotlin": "kt", "kt": "kt",
    "scala": "scala", "sql": "sql", "html": "html", "css": "css", "scss": "scss",
    "less": "less", "json": "json", "yaml": "yaml", "yml": "yaml", "toml": "toml",
    "xml": "xml", "bash": "sh", "sh": "sh", "shell": "sh", "zsh": "zsh",
    "powershell": "ps1", "lua": "lua", "perl": "pl", "r": "r", "dart": "dart",
    "haskell": "hs", "elixir": "ex", "erlang": "erl", "clojure": "clj", "julia": "jl",
    "markdown": "md", "md": "md", "vue": "vue", "svelte": "svelte",
    "graphql": "graphql", "dockerfile": "dockerfile", "makefile": "mk",
    "objective-c": "m", "latex": "tex", "tex": "tex",
}
# Everything else is served as text/plain on purpose: an exported .html or .svg must
# never be rendered by a browser that opens the download inline.
_CODE_TYPES: dict[str, str] = {"json": "application/json", "md": MARKDOWN_TYPE}
# Characters XML 1.0 cannot hold at all (lxml refuses them): C0 controls but tab, LF,
# CR; lone surrogates; the two non-characters.
_XML_INVALID = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")
_WINDOWS_RESERVED = {"CON", "PRN", "AUX", "NUL"} | {f"{p}{i}" for p in ("COM", "LPT")
                                                     for i in range(1, 10)}


@dataclass(frozen=True, slots=True)
class Exported:
    body: bytes
    media_type: str
    filename: str


class ExportError(ValueError):
    """The request names a format or an artifact type that does not exist."""


def export_artifact(
    *,
    title: str,
    type: Literal["text", "code"],
    language: str | None,
    content: str,
    format: Literal["md", "docx", "code"],
) -> Exported:
    """Render one artifact version for download.

    Every combination is allowed: "md" of code is a fenced block under the title;
    "code" of text is the Markdown itself as .md; "docx" of code is a monospace document.
    """
    if type not in ("text", "code"):
        raise ExportError(f"unknown artifact type: {type!r}")
    is_code = type == "code"
    match format:
        case "md":
            text = _code_markdown(title, language, content) if is_code else content
            return Exported(_utf8(text), MARKDOWN_TYPE, _filename(title, "md"))
        case "code":
            ext = _extension(language) if is_code else "md"
            media = _CODE_TYPES.get(ext, TEXT_TYPE)
            return Exported(_utf8(content), media, _filename(title, ext))
        case "docx":
            body = _code_docx(title, language, content) if is_code else _text_docx(
                title, content)
            return Exported(body, DOCX_TYPE, _filename(title, "docx"))
    raise ExportError(f"unknown export format: {format!r}")


# --- Markdown and plain files ---------------------------------------------------------


def _utf8(text: str) -> bytes:
    # Lone surrogates can arrive from JSON; a download must not fail on them.
    return text.encode("utf-8", "replace")


def _code_markdown(title: str, language: str | None, content: str) -> str:
    # The fence must outrun any backtick run inside the code, or the code ends the block.
    longest = max((len(m) for m in re.findall(r"`+", content)), default=0)
    fence = "`" * max(3, longest + 1)
    info = re.sub(r"[^\w+#.-]", "", language or "")
    body = content if content.endswith("\n") or not content else content + "\n"
    heading = f"# {_one_line(title)}\n\n" if title.strip() else ""
    return f"{heading}{fence}{info}\n{body}{fence}\n"


def _extension(language: str | None) -> str:
    return _EXTENSIONS.get((language or "").strip().lower(), "txt")


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _filename(title: str, ext: str) -> str:
    """An ASCII name safe in any file system and in a Content-Disposition header."""
    ascii_title = unicodedata.normalize("NFKD", title).encode("ascii", "ignore").decode()
    stem = re.sub(r"[^A-Za-z0-9._-]+", "-", ascii_title)
    stem = re.sub(r"-{2,}", "-", stem).strip("-._")
    if len(stem) > MAX_STEM:
        cut = stem.rfind("-", 0, MAX_STEM + 1)  # end on a word when one is near
        stem = stem[: cut if cut > MAX_STEM // 2 else MAX_STEM].rstrip("-._")
    if stem.split(".")[0].upper() in _WINDOWS_RESERVED:
        stem = f"{stem}-artifact"
    return f"{stem or 'artifact'}.{ext}"


# --- Word ----------------------------------------------------------------------------


def _parser() -> MarkdownIt:
    # CommonMark plus the two GFM extensions people expect. Raw HTML stays literal text:
    # a Word document has no use for it, and it must not vanish silently either.
    return MarkdownIt("commonmark", {"html": False}).enable(["table", "strikethrough"])


def _text_docx(title: str, content: str) -> bytes:
    tokens = _parser().parse(_XML_INVALID.sub("", content))
    writer = _DocxWriter(_XML_INVALID.sub("", _one_line(title)))
    if _starts_with_heading(tokens, writer.title):
        writer.title_heading = True  # "# <title>" becomes the Title, not a repeat of it
    elif writer.title:
        writer.add_title()
    writer.render(tokens)
    return writer.save()


def _code_docx(title: str, language: str | None, content: str) -> bytes:
    writer = _DocxWriter(_XML_INVALID.sub("", _one_line(title)))
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
        self.styles = _DocStyles(self.doc)
        self.links = _Links(self.doc)
        self._numbers = _Numbering(self.doc, self.styles)
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
            p_pr = _sub(p, "w:pPr")  # children in schema order: pStyle, numPr, pBdr
            if style != "Normal":
                _sub(p_pr, "w:pStyle", val=self.styles.id(style))
            if num_id is not None:
                num_pr = _sub(p_pr, "w:numPr")
                _sub(num_pr, "w:ilvl", val="0")
                _sub(num_pr, "w:numId", val=str(num_id))
            if rule:  # Word's own "horizontal line" is a paragraph's bottom border
                _sub(_sub(p_pr, "w:pBdr"), "w:bottom", val="single", sz="6", space="1",
                     color="auto")
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
                _Inline(self, self._current._p).feed(token.children or [])
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

    def code_lines(self, code: str) -> None:
        # A paragraph per line keeps line breaks and blank lines exactly, and each line
        # stays editable in Word; tabs become real tab characters.
        for line in re.split(r"\r\n?|\n", code):
            _add_run(self._indent(self.paragraph("Code Block"))._p, line)

    def new_table(self, rows: int, cols: int) -> CT_Tbl:
        if self._sect_pr.getprevious() is not None and (
                self._sect_pr.getprevious().tag == _qn("w:tbl")):
            self.paragraph()  # Word would fuse two adjacent tables into one
        tbl = CT_Tbl.new_tbl(rows, cols, self._text_width)
        self._sect_pr.addprevious(tbl)
        tbl.tblPr.style = self.styles.id("Table Grid")
        return tbl


class _DocStyles:
    """Style ids by name, looked up once, and the code styles the template lacks.

    Assigning a style object through python-docx scans every style to find the default
    one, on each paragraph; writing the id into the XML directly keeps export linear."""

    def __init__(self, doc: Document) -> None:
        self._styles = doc.styles
        self._ids: dict[str, str] = {}
        code = self._styles.add_style("Code Block", WD_STYLE_TYPE.PARAGRAPH)
        code.base_style = self._styles["Normal"]
        code.paragraph_format.space_before = Pt(0)
        code.paragraph_format.space_after = Pt(0)
        code.paragraph_format.line_spacing = 1.0
        _mono(code, Pt(9.5))
        _mono(self._styles.add_style("Inline Code", WD_STYLE_TYPE.CHARACTER), None)
        link = self._styles.add_style("Hyperlink", WD_STYLE_TYPE.CHARACTER)  # Word's name
        link.font.color.rgb = RGBColor(0x05, 0x63, 0xC1)
        link.font.underline = True

    def id(self, name: str) -> str:
        if name not in self._ids:
            self._ids[name] = self._styles[name].style_id
        return self._ids[name]

    def style(self, name: str) -> BaseStyle:
        return self._styles[name]


def _mono(style: BaseStyle, size: Pt | None) -> None:
    style.font.name = MONO_FONT
    # font.name sets only the Latin slots; set the East Asian and complex ones too.
    fonts = style.element.get_or_add_rPr().get_or_add_rFonts()
    fonts.set(qn("w:eastAsia"), MONO_FONT)
    fonts.set(qn("w:cs"), MONO_FONT)
    if size is not None:
        style.font.size = size


class _Links:
    """External hyperlink relationships, one per distinct URL.

    python-docx's relate_to scans every relationship and renumbers from rId1 on each
    call, which is quadratic on a link-heavy document; this keeps a dict instead."""

    def __init__(self, doc: Document) -> None:
        self._rels = doc.part.rels
        self._ids: dict[str, str] = {}

    def rel_id(self, url: str) -> str:
        if url not in self._ids:
            rid = f"rIdLink{len(self._ids) + 1}"
            self._rels.add_relationship(RT.HYPERLINK, url, rid, is_external=True)
            self._ids[url] = rid
        return self._ids[url]


class _Numbering:
    """A fresh w:num per ordered list, so each list counts from its own start."""

    def __init__(self, doc: Document, styles: _DocStyles) -> None:
        self._numbering = doc.part.numbering_part.element
        self._styles = styles
        self._abstract: dict[str, int] = {}  # list style name → its abstract numbering
        ids = [int(v) for v in self._numbering.xpath("./w:num/@w:numId")]
        self._next_id = max(ids, default=0) + 1  # python-docx's own search is quadratic

    def restart(self, style_name: str, start: int) -> int:
        if style_name not in self._abstract:
            num_id = self._styles.style(style_name).element.pPr.numPr.numId.val
            num = self._numbering.num_having_numId(num_id)
            self._abstract[style_name] = num.abstractNumId.val
        num = CT_Num.new(self._next_id, self._abstract[style_name])
        num.add_lvlOverride(ilvl=0).add_startOverride(start)
        # Last is the schema's place for w:num (the template has no numIdMacAtCleanup);
        # python-docx's insert would scan all earlier ones each time.
        self._numbering.append(num)
        self._next_id += 1
        return num.numId


# --- inline content ------------------------------------------------------------------

_MARKS = {"strong": "bold", "em": "italic", "s": "strike"}
_MARK_TAGS = {"bold": "w:b", "italic": "w:i", "strike": "w:strike"}


@dataclass(slots=True)
class _Inline:
    """Writes one inline token list (a paragraph, heading or cell) as runs."""

    writer: _DocxWriter
    p: BaseOxmlElement  # the <w:p>
    marks: dict[str, int] = field(default_factory=lambda: dict.fromkeys(_MARKS.values(), 0))
    link: BaseOxmlElement | None = None  # the open <w:hyperlink>, when inside a link
    buffer: list[str] = field(default_factory=list)  # text waiting for its run

    def feed(self, tokens: list[Token]) -> None:
        for token in tokens:
            self._token(token)
        self._flush()

    def _token(self, token: Token) -> None:
        kind, _, edge = token.type.rpartition("_")
        if kind in _MARKS and edge in ("open", "close"):
            self._flush()  # the marks change: the text so far gets its own run
            self.marks[_MARKS[kind]] += 1 if edge == "open" else -1
            return
        match token.type:
            case "text" | "html_inline":
                self.buffer.append(token.content)
            case "softbreak":
                self.buffer.append(" ")  # Markdown joins wrapped lines with a space
            case "hardbreak":
                self._flush()
                _sub(_sub(self._container(), "w:r"), "w:br")
            case "code_inline":
                self._flush()
                self._run(token.content, "Inline Code")
            case "link_open":
                self._open_link(token.attrGet("href") or "")
            case "link_close":
                self._flush()
                self.link = None
            case "image":  # no I/O here: the picture becomes its description, linked
                self._image(str(token.attrGet("src") or ""), token.content)

    def _image(self, src: str, alt: str) -> None:
        if self.link is not None:  # [![badge](img)](url): the outer link wins
            self.buffer.append(alt or src)
            return
        self._open_link(src)
        self.buffer.append(alt or src)
        self._flush()
        self.link = None

    def _open_link(self, href: str) -> None:
        self._flush()
        if not href:  # "[text]()": nothing to point at, the text stays plain
            return
        if href.startswith("#"):  # a place in this document
            self.link = _sub(self.p, "w:hyperlink", anchor=href[1:])
        else:
            self.link = _sub(self.p, "w:hyperlink")
            self.link.set(_qn("r:id"), self.writer.links.rel_id(href))

    def _flush(self) -> None:
        text, self.buffer = "".join(self.buffer), []
        if text:  # emphasis leaves empty text tokens where its delimiters were
            self._run(text, "Hyperlink" if self.link is not None else None)

    def _container(self) -> BaseOxmlElement:
        return self.link if self.link is not None else self.p

    def _run(self, text: str, style: str | None = None) -> None:
        marks = [_MARK_TAGS[mark] for mark, depth in self.marks.items() if depth]
        style_id = self.writer.styles.id(style) if style else None
        _add_run(self._container(), text, style_id, marks)


@functools.cache
def _qn(tag: str) -> str:
    return qn(tag)


def _sub(parent: BaseOxmlElement, tag: str, **attrs: str) -> BaseOxmlElement:
    """A new last child `tag` with w: attributes.

    Built with lxml directly: python-docx's OxmlElement and its property setters cost
    several times more, which adds up to seconds on a large document."""
    return etree.SubElement(parent, _qn(tag), {_qn(f"w:{k}"): v for k, v in attrs.items()})


def _add_run(parent: BaseOxmlElement, text: str, style_id: str | None = None,
             marks: Iterable[str] = ()) -> None:
    run = _sub(parent, "w:r")
    if style_id or marks:
        r_pr = _sub(run, "w:rPr")  # schema order: rStyle, then b, i, strike
        if style_id:
            _sub(r_pr, "w:rStyle", val=style_id)
        for tag in marks:
            _sub(r_pr, tag)
    if "\t" in text:
        run.text = text  # python-docx's setter turns tabs into <w:tab/>
    elif text:
        t = _sub(run, "w:t")
        t.text = text
        if text != text.strip():
            t.set(_qn("xml:space"), "preserve")  # Word would drop outer spaces


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
            _sub(tr.get_or_add_trPr(), "w:tblHeader")
        for tc, spec in zip(tr.tc_lst, cells):
            p = tc.p_lst[0]  # new_tbl gives every cell one empty paragraph
            if spec.align in ("left", "center", "right"):
                _sub(_sub(p, "w:pPr"), "w:jc", val=spec.align)
            inline = _Inline(writer, p)
            inline.marks["bold"] = int(spec.header)
            inline.feed(spec.inline)

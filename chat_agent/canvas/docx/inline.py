"""Inline Markdown content (emphasis, code, links, images, breaks) as Word runs."""

from __future__ import annotations

from dataclasses import dataclass, field

from docx.oxml.xmlchemy import BaseOxmlElement
from markdown_it.token import Token

from chat_agent.canvas.docx.oxml import DocStyles, Links, add_run, qname, sub_element

_MARKS = {"strong": "bold", "em": "italic", "s": "strike"}
_MARK_TAGS = {"bold": "w:b", "italic": "w:i", "strike": "w:strike"}


@dataclass(slots=True)
class Inline:
    """Writes one inline token list (a paragraph, heading or cell) as runs."""

    # Only what runs need, not the writer: render imports this module, never the reverse.
    styles: DocStyles
    links: Links
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
                sub_element(sub_element(self._container(), "w:r"), "w:br")
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
            self.link = sub_element(self.p, "w:hyperlink", anchor=href[1:])
        else:
            self.link = sub_element(self.p, "w:hyperlink")
            self.link.set(qname("r:id"), self.links.rel_id(href))

    def _flush(self) -> None:
        text, self.buffer = "".join(self.buffer), []
        if text:  # emphasis leaves empty text tokens where its delimiters were
            self._run(text, "Hyperlink" if self.link is not None else None)

    def _container(self) -> BaseOxmlElement:
        return self.link if self.link is not None else self.p

    def _run(self, text: str, style: str | None = None) -> None:
        marks = [_MARK_TAGS[mark] for mark, depth in self.marks.items() if depth]
        style_id = self.styles.id(style) if style else None
        add_run(self._container(), text, style_id, marks)

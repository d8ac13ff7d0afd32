"""Word document parts and low-level XML helpers for the DOCX export.

Style ids, hyperlink relationships and list numbering, each kept in a dict so that
export stays linear; and lxml element builders that skip python-docx's slower setters.
"""

from __future__ import annotations

import functools
from typing import Iterable

from docx.document import Document
from docx.enum.style import WD_STYLE_TYPE
from docx.opc.constants import RELATIONSHIP_TYPE as RT
from docx.oxml.ns import qn
from docx.oxml.numbering import CT_Num
from docx.oxml.xmlchemy import BaseOxmlElement
from docx.shared import Pt, RGBColor
from docx.styles.style import BaseStyle
from lxml import etree

MONO_FONT = "Courier New"  # in Word everywhere; LibreOffice maps it to Liberation Mono


class DocStyles:
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


class Links:
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


class Numbering:
    """A fresh w:num per ordered list, so each list counts from its own start."""

    def __init__(self, doc: Document, styles: DocStyles) -> None:
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


# --- lxml helpers --------------------------------------------------------------------


@functools.cache
def qname(tag: str) -> str:
    return qn(tag)


def sub_element(parent: BaseOxmlElement, tag: str, **attrs: str) -> BaseOxmlElement:
    """A new last child `tag` with w: attributes.

    Built with lxml directly: python-docx's OxmlElement and its property setters cost
    several times more, which adds up to seconds on a large document."""
    attributes = {qname(f"w:{k}"): v for k, v in attrs.items()}
    return etree.SubElement(parent, qname(tag), attributes)


def add_run(parent: BaseOxmlElement, text: str, style_id: str | None = None,
            marks: Iterable[str] = ()) -> None:
    run = sub_element(parent, "w:r")
    if style_id or marks:
        r_pr = sub_element(run, "w:rPr")  # schema order: rStyle, then b, i, strike
        if style_id:
            sub_element(r_pr, "w:rStyle", val=style_id)
        for tag in marks:
            sub_element(r_pr, tag)
    if "\t" in text:
        run.text = text  # python-docx's setter turns tabs into <w:tab/>
    elif text:
        t = sub_element(run, "w:t")
        t.text = text
        if text != text.strip():
            t.set(qname("xml:space"), "preserve")  # Word would drop outer spaces

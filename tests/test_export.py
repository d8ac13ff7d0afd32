"""Artifact export: Markdown, source files and Word documents, opened and read back.

Every DOCX assertion reads the produced file with python-docx, the way a user's Word
would see it: paragraph styles, run formatting, hyperlinks, numbering, tables.
"""

from __future__ import annotations

import io
import shutil
import time
import zipfile
from pathlib import Path

import docx
import pytest
from docx.document import Document
from docx.oxml.ns import qn
from docx.text.paragraph import Paragraph
from lxml import etree

from chat_agent.canvas.export import ExportError, Exported, export_artifact
from tests import pace, reaper

DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"


def export_text(content: str, title: str = "Doc", format: str = "docx") -> Exported:
    return export_artifact(title=title, type="text", language=None, content=content,
                           format=format)


def export_code(content: str, language: str | None = "python", title: str = "Script",
                format: str = "code") -> Exported:
    return export_artifact(title=title, type="code", language=language, content=content,
                           format=format)


def open_docx(content: str, title: str = "Doc") -> Document:
    return docx.Document(io.BytesIO(export_text(content, title).body))


def body(document: Document) -> list[Paragraph]:
    """The paragraphs after the Title one."""
    return [p for p in document.paragraphs if p.style.name != "Title"]


def runs(paragraph: Paragraph) -> list[tuple[str, bool, bool, str]]:
    return [(r.text, bool(r.bold), bool(r.italic), r.style.name) for r in paragraph.runs]


def all_text(document: Document) -> str:
    cells = [c.text for t in document.tables for row in t.rows for c in row.cells]
    return "\n".join([p.text for p in document.paragraphs] + cells)


def num_id(paragraph: Paragraph) -> int | None:
    p_pr = paragraph._p.pPr
    return None if p_pr is None or p_pr.numPr is None else p_pr.numPr.numId.val


# --- markdown and code --------------------------------------------------------------


def test_markdown_of_a_text_artifact_is_the_markdown_itself() -> None:
    out = export_text("# Hello\n\nSome *text*.\n", title="Hello", format="md")
    assert out.body == b"# Hello\n\nSome *text*.\n"
    assert out.media_type == "text/markdown; charset=utf-8"
    assert out.filename == "Hello.md"


def test_markdown_of_code_is_a_fenced_block_under_the_title() -> None:
    out = export_code("print('hi')", title="Greeter", format="md")
    assert out.body.decode() == "# Greeter\n\n```python\nprint('hi')\n```\n"
    assert out.filename == "Greeter.md"


def test_the_fence_outruns_backticks_inside_the_code() -> None:
    text = export_code('s = """```"""\n', language="python", format="md").body.decode()
    assert text.splitlines()[2] == "````python"
    assert text.endswith("\n````\n")


@pytest.mark.parametrize(("language", "filename"), [
    ("python", "Script.py"), ("Python", "Script.py"), ("typescript", "Script.ts"),
    ("javascript", "Script.js"), ("rust", "Script.rs"), ("go", "Script.go"),
    ("java", "Script.java"), ("c", "Script.c"), ("cpp", "Script.cpp"),
    ("csharp", "Script.cs"), ("php", "Script.php"), ("ruby", "Script.rb"),
    ("swift", "Script.swift"), ("kotlin", "Script.kt"), ("sql", "Script.sql"),
    ("html", "Script.html"), ("css", "Script.css"), ("json", "Script.json"),
    ("yaml", "Script.yaml"), ("bash", "Script.sh"), ("sh", "Script.sh"),
    ("brainfuck", "Script.txt"), (None, "Script.txt"), ("", "Script.txt"),
])
def test_code_export_names_the_file_by_language(language: str | None,
                                                filename: str) -> None:
    out = export_code("x = 1\n", language=language)
    assert out.filename == filename
    assert out.body == b"x = 1\n"


def test_code_media_types_never_let_a_browser_render_the_download() -> None:
    assert export_code("<script>", language="html").media_type == "text/plain; charset=utf-8"
    assert export_code("{}", language="json").media_type == "application/json"


def test_code_of_a_text_artifact_is_its_markdown_file() -> None:
    out = export_text("# Notes\n", title="Notes", format="code")
    assert (out.body, out.filename) == (b"# Notes\n", "Notes.md")
    assert out.media_type == "text/markdown; charset=utf-8"


def test_text_is_utf8_and_survives_lone_surrogates() -> None:
    assert export_text("héllo ✓", format="md").body == "héllo ✓".encode()
    assert export_text("bad \ud800 char", format="md").body == b"bad ? char"


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"type": "text", "format": "pdf"}, "format"),
    ({"type": "image", "format": "md"}, "type"),
])
def test_unknown_format_or_type_is_an_export_error(kwargs: dict, message: str) -> None:
    with pytest.raises(ExportError, match=message) as raised:
        export_artifact(title="t", language=None, content="x", **kwargs)
    assert isinstance(raised.value, ValueError)


# --- filenames -----------------------------------------------------------------------


@pytest.mark.parametrize(("title", "stem"), [
    ("My Essay: Draft 2", "My-Essay-Draft-2"),
    ("../../etc/passwd", "etc-passwd"),
    ("a/b\\c", "a-b-c"),
    ("tab\there\x00\x1f\nnewline", "tab-here-newline"),
    ("Café crème brûlée", "Cafe-creme-brulee"),
    ("项目计划", "artifact"),
    ("", "artifact"),
    ("   ", "artifact"),
    ("...", "artifact"),
    (".hidden", "hidden"),
    ("CON", "CON-artifact"),
    ("v1.2 release notes", "v1.2-release-notes"),
])
def test_filenames_are_safe(title: str, stem: str) -> None:
    assert export_text("x", title=title, format="md").filename == f"{stem}.md"


def test_long_titles_are_cut_on_a_word() -> None:
    name = export_text("x", title="word " * 40, format="docx").filename
    stem = name.removesuffix(".docx")
    assert len(stem) <= 80 and stem.endswith("word") and not stem.endswith("-")
    assert export_text("x", title="a" * 300, format="md").filename == "a" * 80 + ".md"


# --- docx: structure -----------------------------------------------------------------


def test_docx_media_type_name_and_document_title() -> None:
    out = export_text("Hello.", title="Quarterly Report")
    assert (out.media_type, out.filename) == (DOCX, "Quarterly-Report.docx")
    document = docx.Document(io.BytesIO(out.body))
    props = document.core_properties
    assert (props.title, props.author, props.comments) == ("Quarterly Report", "chat-agent", "")
    assert props.created.year >= 2025
    assert [(p.style.name, p.text) for p in document.paragraphs] == [
        ("Title", "Quarterly Report"), ("Normal", "Hello.")]


def test_a_leading_heading_equal_to_the_title_becomes_the_title() -> None:
    document = open_docx("# Quarterly Report\n\nText\n\n# Quarterly Report\n",
                         title="Quarterly Report")
    assert [(p.style.name, p.text) for p in document.paragraphs] == [
        ("Title", "Quarterly Report"), ("Normal", "Text"),
        ("Heading 1", "Quarterly Report")]


def test_headings_map_to_word_heading_styles() -> None:
    md = "\n\n".join(f"{'#' * n} Level {n}" for n in range(1, 7)) + "\n\nSetext\n---\n"
    styles = [(p.style.name, p.text) for p in body(open_docx(md))]
    assert styles == [(f"Heading {n}", f"Level {n}") for n in range(1, 7)] + [
        ("Heading 2", "Setext")]


def test_paragraphs_join_soft_breaks_and_keep_hard_ones() -> None:
    paragraphs = body(open_docx("one\ntwo  \nthree\n\nnext paragraph\n"))
    assert [p.text for p in paragraphs] == ["one two\nthree", "next paragraph"]


def test_bold_italic_both_and_strikethrough_are_run_formatting() -> None:
    (paragraph,) = body(open_docx("a **b** *c* ***d*** _e_ __f__ ~~g~~ h\n"))
    assert paragraph.text == "a b c d e f g h"
    formatted = {r.text.strip(): (bool(r.bold), bool(r.italic), bool(r.font.strike))
                 for r in paragraph.runs if r.text.strip()}
    assert formatted == {"a": (False, False, False), "b": (True, False, False),
                         "c": (False, True, False), "d": (True, True, False),
                         "e": (False, True, False), "f": (True, False, False),
                         "g": (False, False, True), "h": (False, False, False)}


def test_inline_code_is_a_monospace_run_and_keeps_its_markers_literal() -> None:
    (paragraph,) = body(open_docx("call `f(**kw)` now, **`bold code`**\n"))
    code = [r for r in paragraph.runs if r.style.name == "Inline Code"]
    assert [r.text for r in code] == ["f(**kw)", "bold code"]
    assert code[0].style.font.name == "Courier New"
    assert not code[0].bold and code[1].bold
    assert paragraph.text == "call f(**kw) now, bold code"


def test_links_are_real_hyperlinks() -> None:
    url = "https://example.com/a?b=1&c=2"
    md = f"See [the *docs*]({url}), [again]({url}) and [top](#intro).\n"
    (paragraph,) = body(open_docx(md))
    assert paragraph.text == "See the docs, again and top."
    first, second, anchor = paragraph.hyperlinks
    assert (first.url, first.text) == ("https://example.com/a?b=1&c=2", "the docs")
    assert first.address == second.address  # one relationship per distinct URL
    assert [(r.text, r.italic, r.style.name) for r in first.runs] == [
        ("the ", None, "Hyperlink"), ("docs", True, "Hyperlink")]
    assert (anchor.fragment, anchor.text) == ("intro", "top")
    rel = paragraph.part.rels[first._hyperlink.rId]
    assert rel.is_external


def test_autolinks_and_images_become_linked_text() -> None:
    md = ("<https://a.example> ![a chart](https://img.example/c.png) "
          "[![badge](https://img.example/b.svg) ok](https://ci.example) [bare]()\n")
    (paragraph,) = body(open_docx(md))
    assert [(h.url, h.text) for h in paragraph.hyperlinks] == [
        ("https://a.example", "https://a.example"),
        ("https://img.example/c.png", "a chart"), ("https://ci.example", "badge ok")]
    assert paragraph.text.endswith(" badge ok bare")


def test_bullet_lists_nest_with_the_numbered_builtin_styles() -> None:
    md = "- one\n- two\n  - two.a\n    - two.a.i\n      - deeper\n- three\n"
    items = [(p.style.name, p.text) for p in body(open_docx(md))]
    assert items == [("List Bullet", "one"), ("List Bullet", "two"),
                     ("List Bullet 2", "two.a"), ("List Bullet 3", "two.a.i"),
                     ("List Bullet 3", "deeper"), ("List Bullet", "three")]
    deeper = body(open_docx(md))[4]
    assert deeper.paragraph_format.left_indent is not None  # level 4 still steps right


def test_numbered_lists_nest_and_each_list_restarts_its_numbering() -> None:
    md = "1. a\n2. b\n   1. b1\n   2. b2\n3. c\n\nbreak\n\n7. seven\n8. eight\n"
    document = open_docx(md)
    items = [p for p in body(document) if p.style.name.startswith("List")]
    assert [(p.style.name, p.text) for p in items] == [
        ("List Number", "a"), ("List Number", "b"), ("List Number 2", "b1"),
        ("List Number 2", "b2"), ("List Number", "c"), ("List Number", "seven"),
        ("List Number", "eight")]
    ids = [num_id(p) for p in items]
    assert ids[0] == ids[1] == ids[4] and ids[2] == ids[3] and ids[5] == ids[6]
    assert len({ids[0], ids[2], ids[5]}) == 3  # three lists, three counters
    numbering = document.part.numbering_part.element
    starts = {n: numbering.num_having_numId(n).xpath(".//w:startOverride/@w:val")
              for n in (ids[0], ids[5])}
    assert starts == {ids[0]: ["1"], ids[5]: ["7"]}


def test_mixed_lists_and_continuation_paragraphs() -> None:
    md = "1. first\n\n   more about first\n\n   - bullet inside\n2. second\n-\n"
    items = [(p.style.name, p.text) for p in body(open_docx(md))]
    assert items == [("List Number", "first"), ("List Continue", "more about first"),
                     ("List Bullet 2", "bullet inside"), ("List Number", "second"),
                     ("List Bullet", "")]


def test_block_quotes_use_the_quote_style() -> None:
    md = "> To be\n> or not.\n>\n> > nested\n\nafter\n"
    assert [(p.style.name, p.text) for p in body(open_docx(md))] == [
        ("Quote", "To be or not."), ("Quote", "nested"), ("Normal", "after")]


def test_code_blocks_are_monospace_paragraphs_line_by_line() -> None:
    md = "```python\ndef f():\n\treturn 1\n\n    # spaced\n```\n\n    indented code\n"
    document = open_docx(md)
    lines = body(document)
    assert {p.style.name for p in lines} == {"Code Block"}
    assert [p.text for p in lines] == ["def f():", "\treturn 1", "", "    # spaced",
                                       "indented code"]
    style = document.styles["Code Block"]
    assert style.font.name == "Courier New"
    assert style.paragraph_format.space_after == 0


def test_horizontal_rules_are_bordered_paragraphs() -> None:
    above, rule, below = body(open_docx("above\n\n---\n\nbelow\n"))
    assert rule.text == ""
    assert rule._p.pPr.find(qn("w:pBdr")).find(qn("w:bottom")).get(qn("w:val")) == "single"
    assert (above.text, below.text) == ("above", "below")


def test_tables_become_word_tables() -> None:
    md = ("| Name | Age | City |\n|:-----|----:|:----:|\n"
          "| **Ann** | 31 | `Oslo` |\n| Bob | 4 |\n")
    document = open_docx(md)
    (table,) = document.tables
    assert table.style.name == "Table Grid"
    assert [[c.text for c in row.cells] for row in table.rows] == [
        ["Name", "Age", "City"], ["Ann", "31", "Oslo"], ["Bob", "4", ""]]
    header = table.rows[0]
    assert all(r.bold for c in header.cells for r in c.paragraphs[0].runs)
    assert header._tr.trPr.find(qn("w:tblHeader")) is not None
    ann, age, city = table.rows[1].cells
    assert ann.paragraphs[0].runs[0].bold and not age.paragraphs[0].runs[0].bold
    assert city.paragraphs[0].runs[0].style.name == "Inline Code"
    assert [c.paragraphs[0].alignment for c in table.rows[1].cells] == [0, 2, 1]


def test_adjacent_tables_stay_apart() -> None:
    document = open_docx("| a |\n|---|\n| 1 |\n\n| b |\n|---|\n| 2 |\n")
    blocks = [child.tag.rsplit("}", 1)[1] for child in document.element.body]
    assert blocks == ["p", "tbl", "p", "tbl", "sectPr"]  # Title, table, gap, table


def test_no_raw_markdown_markers_remain() -> None:
    md = ("# Title here\n\n## Sub\n\nSome **bold**, *it*, ~~gone~~, [l](https://x.y).\n\n"
          "- **item**\n\n1. *one*\n\n> **quoted**\n\n---\n\n| **h** |\n|---|\n| *c* |\n")
    text = all_text(open_docx(md))
    for marker in ("**", "~~", "](", "# ", "```", "| ", "> ", "---"):
        assert marker not in text, marker
    assert not any(line.lstrip().startswith(("- ", "1. ", "*")) for line in text.splitlines())


def test_raw_html_and_control_characters_are_kept_safely() -> None:
    (paragraph,) = body(open_docx("a <b>tag</b> and \x07bell\x0b\n"))
    assert paragraph.text == "a <b>tag</b> and bell"


def test_empty_and_whitespace_content() -> None:
    assert [p.style.name for p in open_docx("").paragraphs] == ["Title"]
    assert body(open_docx("   \n\n")) == []
    assert open_docx("x", title="").paragraphs[0].text == "x"


def test_docx_of_code_is_a_monospace_document_with_the_title() -> None:
    out = export_code("def f():\n    return '**not bold**'\n", format="docx")
    document = docx.Document(io.BytesIO(out.body))
    assert out.filename == "Script.docx"
    assert [(p.style.name, p.text) for p in document.paragraphs] == [
        ("Title", "Script"), ("Subtitle", "python"), ("Code Block", "def f():"),
        ("Code Block", "    return '**not bold**'"), ("Code Block", "")]
    assert document.styles["Code Block"].font.name == "Courier New"


# --- the file itself -----------------------------------------------------------------

SAMPLE = """# Report

Intro with **bold**, *italic*, `code` and a [link](https://example.com).

## Items

- one
  - nested
1. first
2. second

> quoted

```js
console.log(1)
```

---

| a | b |
|---|---|
| 1 | 2 |
"""


def test_docx_is_a_well_formed_package() -> None:
    with zipfile.ZipFile(io.BytesIO(export_text(SAMPLE, title="Report").body)) as package:
        assert package.testzip() is None
        names = set(package.namelist())
        assert {"[Content_Types].xml", "_rels/.rels", "word/document.xml",
                "word/styles.xml", "word/numbering.xml",
                "word/_rels/document.xml.rels"} <= names
        for name in names:
            if name.endswith((".xml", ".rels")):
                etree.fromstring(package.read(name))  # raises if not well-formed
        document = package.read("word/document.xml").decode()
        assert "ns0:" not in document  # every element in Word's own w: prefix


def _office() -> str | None:
    return shutil.which("soffice") or shutil.which("libreoffice")


@pytest.mark.skipif(_office() is None, reason="LibreOffice is not installed")
def test_libreoffice_opens_the_document(tmp_path: Path) -> None:
    source = tmp_path / "report.docx"
    source.write_bytes(export_text(SAMPLE, title="Report").body)
    reaper.run([_office(), "--headless", f"-env:UserInstallation=file://{tmp_path}/lo",
                    "--convert-to", "txt:Text", "--outdir", str(tmp_path), str(source)],
                   check=True, capture_output=True, timeout=120)
    text = (tmp_path / "report.txt").read_text(encoding="utf-8-sig")
    assert "Intro with bold, italic, code and a link." in text
    assert "console.log(1)" in text


def big_markdown(size: int) -> str:
    """Realistic mixed content: prose with inline marks, lists, code, quotes, tables."""
    section = (
        "## Section {i}\n\nThis paragraph has **bold**, *italic*, `code`, a "
        "[link](https://example.com/{i}) and enough plain words to read like prose "
        "written by a person, wrapping\nover two source lines.\n\n"
        "- point one with *emphasis*\n- point two\n  - nested point\n\n"
        "1. step one\n2. step two\n\n> A quotation, **strong**.\n\n"
        "```python\ndef f{i}(x):\n    return x * {i}\n```\n\n"
        "| key | value |\n|-----|------:|\n| a | {i} |\n| b | 2 |\n\n"
    )
    parts, total, i = [], 0, 0
    while total < size:
        parts.append(section.format(i=i))
        total += len(parts[-1])
        i += 1
    return "".join(parts)


def test_a_one_megabyte_document_exports_in_reasonable_time() -> None:
    md = big_markdown(1_000_000)
    started = time.perf_counter()
    out = export_text(md, title="Big")
    elapsed = time.perf_counter() - started
    print(f"\n1 MB of Markdown ({len(md):,} chars) → {len(out.body):,} bytes of DOCX "
          f"in {elapsed:.1f} s")
    document = docx.Document(io.BytesIO(out.body))
    sections = md.count("## Section")
    assert len(document.tables) == sections
    # Counted in the XML: python-docx's style lookup is slow on 40,000 paragraphs.
    headings = document.element.body.xpath('./w:p/w:pPr/w:pStyle[@w:val="Heading2"]')
    assert len(headings) == sections
    assert elapsed < pace.scaled(60), f"export took {elapsed:.1f} s"

"""Sample files built in code for tests: PDFs, DOCX, images (nothing binary is checked in)."""

from __future__ import annotations

import io

import docx
from PIL import Image


def make_pdf(pages: list[list[str] | bytes]) -> bytes:
    """A valid PDF, one page per list of lines, each line a text object in Helvetica (or per
    bytes: a content stream object as it stands)."""
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>", b"",
               b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>"]
    kids = []
    for lines in pages:
        if isinstance(lines, bytes):
            objects.append(lines)
        else:
            shown = [line.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)") for line in lines]
            operators = ["BT /F1 11 Tf 13 TL 72 720 Td", *(f"({s}) Tj T*" for s in shown), "ET"]
            stream = "\n".join(operators).encode("latin-1")
            objects.append(b"<< /Length %d >>\nstream\n%s\nendstream" % (len(stream), stream))
        objects.append(b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
                       b"/Resources << /Font << /F1 3 0 R >> >> /Contents %d 0 R >>" % len(objects))
        kids.append(len(objects))
    objects[1] = b"<< /Type /Pages /Kids [%s] /Count %d >>" % (b" ".join(b"%d 0 R" % k for k in kids), len(kids))
    out, offsets = bytearray(b"%PDF-1.4\n"), []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


def long_pdf(pages: int = 500) -> bytes:
    filler = "The committee reviewed the figures for the quarter and agreed on the next steps."
    return make_pdf([[f"Report page {n}.", filler, f"Figure {n} shows the trend."]
                     + (["The xylophone budget is discussed here."] if n == 377 else [])
                     for n in range(1, pages + 1)])


def make_docx(build) -> bytes:
    document = docx.Document()
    build(document)
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()



def make_png(width: int = 64, height: int = 48, color: tuple[int, int, int] = (200, 30, 30)) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height), color).save(out, "PNG")
    return out.getvalue()


def bomb_png(edge: int = 20_000) -> bytes:
    """A small file that declares edge×edge pixels (400 MP): a decompression bomb."""
    out = io.BytesIO()
    Image.new("1", (edge, edge)).save(out, "PNG", optimize=True)
    return out.getvalue()

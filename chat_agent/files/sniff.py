"""What a stored file is, decided from its bytes: `sniff(data, filename)`.

A client's file name and claimed type are not trusted: the media type comes from the
magic numbers at the start of the bytes (PNG, JPEG, GIF, WEBP, PDF, a ZIP holding a Word
document), or, for text, from the bytes being UTF-8 without NUL bytes. The name only
picks among the text types (an .md file is Markdown, a .csv file CSV, anything else plain
text), and is checked against the bytes when it claims a binary type: "photo.png" that is
really text, or "report.pdf" that is really a ZIP, is refused and the message says so.
Any image named as any other image format is accepted as what its bytes are, since
browsers and CDNs routinely serve a WEBP as ".jpg", and every image format is handled alike.
"""

from __future__ import annotations

import io
import os
import zipfile

from chat_agent.files.docparse import MAX_UNZIPPED, MAX_ZIP_ENTRIES

PNG, JPEG, GIF, WEBP = "image/png", "image/jpeg", "image/gif", "image/webp"
PDF = "application/pdf"
DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
TEXT, MARKDOWN, CSV = "text/plain", "text/markdown", "text/csv"

IMAGE_TYPES = frozenset({PNG, JPEG, GIF, WEBP})
MEDIA_TYPES = frozenset({*IMAGE_TYPES, PDF, DOCX, TEXT, MARKDOWN, CSV})
EXTENSIONS = {PNG: ".png", JPEG: ".jpg", GIF: ".gif", WEBP: ".webp", PDF: ".pdf", DOCX: ".docx",
              TEXT: ".txt", MARKDOWN: ".md", CSV: ".csv"}
ACCEPTED = ("Upload a PNG, JPEG, GIF or WEBP image, a PDF, a Word document (.docx), "
            "or UTF-8 text (.txt, .md, .csv).")

_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_PNG_HEADER = 33  # signature, then the IHDR chunk: length, type, 13 bytes of data, CRC
_TEXT_TYPES = {".md": MARKDOWN, ".markdown": MARKDOWN, ".csv": CSV}
# What a name claims, for the extensions that claim a binary type.
_CLAIMS = {".png": "image", ".jpg": "image", ".jpeg": "image", ".gif": "image", ".webp": "image",
           ".pdf": "pdf", ".docx": "docx"}
_KIND_NAMES = {"image": "an image", "pdf": "a PDF", "docx": "a Word document", "text": "text"}


class FileError(Exception):
    """A file the server will not store or cannot find; `message` is safe to show a user.

    `code` is "unsupported_type", "too_large" or "not_found". Re-exported by chat_agent.files.
    """

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


def sniff(data: bytes, filename: str) -> str:
    """The media type of `data` (one of MEDIA_TYPES), or FileError("unsupported_type")."""
    name = os.path.basename(filename) or "the file"
    if not data:
        raise FileError("unsupported_type", f"{name!r} is empty.")
    media_type, what = _identify(data, name)
    claimed = _CLAIMS.get(os.path.splitext(name)[1].lower())
    if claimed is not None and (media_type is None or kind(media_type) != claimed):
        raise FileError("unsupported_type",
                        f"{name!r} is named as {_KIND_NAMES[claimed]}, but its content is {what}.")
    if media_type is None:
        raise FileError("unsupported_type", f"{name!r} is {what}, which is not supported. {ACCEPTED}")
    if media_type == TEXT:
        return _TEXT_TYPES.get(os.path.splitext(name)[1].lower(), TEXT)
    return media_type


def kind(media_type: str) -> str:
    """"image", "pdf", "docx" or "text": what a file is for, whatever its exact format."""
    if media_type in IMAGE_TYPES:
        return "image"
    return {PDF: "pdf", DOCX: "docx"}.get(media_type, "text")


def _identify(data: bytes, name: str) -> tuple[str | None, str]:
    """(media type or None, what the bytes are in words). Raises FileError itself for a
    file of a supported type that is damaged or dangerous, where no name could help."""
    if data.startswith(_PNG_SIGNATURE):
        if len(data) < _PNG_HEADER or data[12:16] != b"IHDR":
            raise FileError("unsupported_type", f"{name!r} starts like a PNG image, but its header is "
                                                "truncated or damaged.")
        return PNG, "a PNG image"
    if data.startswith(b"\xff\xd8\xff"):
        return JPEG, "a JPEG image"
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return GIF, "a GIF image"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return WEBP, "a WEBP image"
    if data.startswith(b"%PDF-"):
        return PDF, "a PDF"
    if data.startswith(b"PK\x03\x04"):
        return _zip(data, name)
    if b"\0" in data:
        return None, "binary data"
    try:
        data.decode("utf-8")  # a BOM decodes as U+FEFF: fine
    except UnicodeDecodeError:
        return None, "neither UTF-8 text nor a known binary format"
    return TEXT, "text"


def _zip(data: bytes, name: str) -> tuple[str | None, str]:
    """Only the central directory is read: nothing is inflated here. The document parser
    has its own guard against members that lie about their size."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            entries = archive.infolist()
    except Exception:  # noqa: BLE001 - zipfile raises many kinds on crafted archives
        return None, "a damaged ZIP archive"
    names = {entry.filename for entry in entries}
    if "word/document.xml" not in names:
        return None, "a ZIP archive, not a Word document"
    if len(entries) > MAX_ZIP_ENTRIES:
        raise FileError("unsupported_type", f"{name!r} holds more than {MAX_ZIP_ENTRIES:,} parts; "
                                            "refused as a possible ZIP bomb.")
    if sum(entry.file_size for entry in entries) > MAX_UNZIPPED:
        raise FileError("unsupported_type", f"{name!r} expands to more than {MAX_UNZIPPED // 2**20} MB "
                                            "when unzipped; refused as a possible ZIP bomb.")
    return DOCX, "a Word document"

"""The attachments of a `message`: checked, stored with the conversation, and turned into
what the model reads.

Every image is decoded and checked with Pillow before anything else sees it (a bomb, a
text file named .png or a truncated file is refused here, with a message the client can
show), stored as a file of the conversation so the image tools and the code interpreter
can work on it, and sent to the model scaled to the size Claude recommends, labelled with
its id. Documents are parsed in a limited child process, once: the result is kept beside
the file. A small document goes into the message whole; a large one as a paragraph that
tells the model to read it with analyze_document, so a 500-page PDF never floods the context.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import re
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Iterator

from chat_agent.files.documents import DocumentError, ParsedDocument, parse_document, render_for_model
from chat_agent.files.catalog import FileError, StoredFile
from chat_agent.files.sniff import IMAGE_TYPES
from chat_agent.files.image_fetch import fetch_image
from chat_agent.files.images import ImageError, PreparedImage, image_block, prepare_image
from chat_agent.protocol import Attachment, DocumentAttachment, ErrorCode, ImageAttachment
from chat_agent.rejection import FrameRejected

if TYPE_CHECKING:
    from chat_agent.config import Settings
    from chat_agent.files.catalog import Files

MAX_IMAGES = 20  # per message; the API takes more, but each costs up to ~1,600 tokens
MAX_DOCUMENTS = 10
DECODING = 2  # images decoded at once, across all conversations
PARSED = "parsed.json"  # the derived blob holding a document's parsed text
_DATA_URL = re.compile(r"^data:([\w/+.-]+)?(;[\w=-]+)*;base64,", re.IGNORECASE)
_FILE_ERRORS: dict[str, ErrorCode] = {"too_large": "too_large", "not_found": "not_found"}


@dataclass(slots=True)
class PreparedAttachments:
    blocks: list[dict[str, Any]] = field(default_factory=list)  # model content, before the user's text
    visible: list[dict[str, Any]] = field(default_factory=list)  # VisibleMessage.attachments


Shown = tuple[list[dict[str, Any]], dict[str, Any]]  # (model blocks, visible summary) of one attachment
Keep = Callable[[], Awaitable[Shown]]  # stores a checked attachment with the conversation


def image_blocks(prepared: PreparedImage, file: StoredFile) -> list[dict[str, Any]]:
    """An image as the model sees it: its label (with the id tools take), then the image."""
    return [{"type": "text", "text": file.label}, image_block(prepared)]


class DocumentLibrary:
    """Parsed documents, parsed at most once each and a few at a time (each parse is a
    process of up to several hundred MB)."""

    def __init__(self, files: "Files", *, concurrency: int = 2, timeout: float = 20.0, memory_mb: int = 768):
        self._files = files
        self._slots = asyncio.Semaphore(concurrency)
        self._timeout = timeout
        self._memory_mb = memory_mb

    async def parsed(self, owner: str, file: StoredFile) -> ParsedDocument:
        """The file's parsed text: from the cache beside it, or parsed now (its bytes are
        read only then) and cached."""
        cached = await self._files.read_derived(owner, file.id, PARSED)
        if cached is not None:
            try:
                return ParsedDocument.from_json(cached.decode("utf-8"))
            except (ValueError, TypeError, KeyError):
                pass  # an older or damaged cache: parse again
        file, data = await self._files.read(owner, file.id)
        doc = await self.parse(data, file.media_type, file.filename)
        await self.remember(owner, file, doc)
        return doc

    async def parse(self, data: bytes, media_type: str, filename: str) -> ParsedDocument:
        async with self._slots:
            return await parse_document(data, media_type, filename, timeout=self._timeout, memory_mb=self._memory_mb)

    async def remember(self, owner: str, file: StoredFile, doc: ParsedDocument) -> None:
        await self._files.write_derived(owner, file.id, PARSED, doc.to_json().encode("utf-8"))


@contextmanager
def _refusing(where: str) -> Iterator[None]:
    """An attachment's failure as the `error` the client gets, naming the attachment."""
    try:
        yield
    except (ImageError, DocumentError) as exc:
        raise FrameRejected("invalid_attachment", f"{where}: {exc}") from None
    except FileError as exc:
        raise FrameRejected(_FILE_ERRORS.get(exc.code, "invalid_attachment"), f"{where}: {exc.message}") from None


class AttachmentReader:
    """Turns a message's attachments into model blocks and visible summaries."""

    def __init__(self, files: "Files", documents: DocumentLibrary, settings: "Settings"):
        self._files = files
        self._documents = documents
        self._settings = settings
        self._decoding = asyncio.Semaphore(DECODING)

    async def prepare(self, owner: str, conversation_id: str, attachments: list[Attachment]) -> PreparedAttachments:
        if not attachments:  # most messages
            return PreparedAttachments()
        images = [a for a in attachments if isinstance(a, ImageAttachment)]
        documents = [a for a in attachments if isinstance(a, DocumentAttachment)]
        if len(images) > MAX_IMAGES or len(documents) > MAX_DOCUMENTS:
            raise FrameRejected("invalid_attachment", f"A message may carry at most {MAX_IMAGES} images "
                                                        f"and {MAX_DOCUMENTS} documents.")
        # Every attachment is checked (concurrently) before any is stored or linked to the
        # conversation: one bad attachment refuses the message and leaves nothing behind.
        keeps = await _all(
            *(self._image(owner, conversation_id, a, n) for n, a in enumerate(images, 1)),
            *(self._document(owner, conversation_id, a, n) for n, a in enumerate(documents, 1)))
        prepared = PreparedAttachments()
        for blocks, visible in await _all(*(keep() for keep in keeps)):
            prepared.blocks.extend(blocks)
            prepared.visible.append(visible)
        return prepared

    # ---- images --------------------------------------------------------------------------

    async def _image(self, owner: str, conversation_id: str, attachment: ImageAttachment, n: int) -> Keep:
        where = f"Image attachment {n}"
        sources = [s for s in (attachment.url, attachment.upload_id, attachment.data) if s is not None]
        if len(sources) != 1:
            raise FrameRejected("invalid_frame", f"{where} needs exactly one of `url`, `uploadId` or `data`.")
        with _refusing(where):
            if attachment.upload_id is not None:
                file, data = await self._files.read(owner, attachment.upload_id)
                if not file.is_image:
                    raise FrameRejected("invalid_attachment", f"{where}: upload {file.id} is {file.media_type}, "
                                                              "not an image; attach it as a document.")
                prepared = await self._prepare(data)

                async def keep() -> Shown:
                    with _refusing(where):
                        await self._files.attach(owner, conversation_id, file.id)
                    return self._image_shown(prepared, file)
                return keep
            data, name = (await self._fetch(attachment.url) if attachment.url is not None
                          else self._decode(attachment, where, n))
            prepared = await self._prepare(data)

        async def store() -> Shown:
            with _refusing(where):
                stored = await self._files.save(owner, data, name, source="attachment", conversation_id=conversation_id)
            return self._image_shown(prepared, stored)
        return store

    def _image_shown(self, prepared: PreparedImage, file: StoredFile) -> Shown:
        return image_blocks(prepared, file), {
            "type": "image", "fileId": file.id, "url": self._files.url(file), "filename": file.filename,
            "mediaType": file.media_type, "width": file.width, "height": file.height}

    async def _prepare(self, data: bytes) -> PreparedImage:
        # A 40-megapixel image decodes to ~160 MB: a few at a time, however many are attached.
        async with self._decoding:
            return await asyncio.to_thread(prepare_image, data)

    async def _fetch(self, url: str) -> tuple[bytes, str]:
        settings = self._settings
        data = await fetch_image(url, max_bytes=settings.image_fetch_max_bytes, timeout=settings.image_fetch_timeout)
        name = url.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1] or "image"
        return data, name[:120]

    def _decode(self, attachment: ImageAttachment, where: str, n: int) -> tuple[bytes, str]:
        raw = attachment.data or ""
        match = _DATA_URL.match(raw)
        claimed = attachment.media_type or (match.group(1) if match else None)
        if claimed is not None and claimed.lower() not in IMAGE_TYPES:
            raise FrameRejected("invalid_attachment", f"{where}: {claimed} is not supported; send PNG, JPEG, "
                                                      "GIF or WEBP.")
        if len(raw) > self._settings.upload_max_bytes * 4 // 3 + 4:
            raise FrameRejected("too_large", f"{where} is larger than {self._settings.upload_max_bytes:,} bytes.")
        try:
            data = base64.b64decode(raw[match.end():] if match else raw, validate=True)
        except (binascii.Error, ValueError):
            raise FrameRejected("invalid_attachment", f"{where}: `data` is not valid base64.") from None
        extension = (claimed or "image/png").split("/")[-1].replace("jpeg", "jpg")
        return data, f"image-{n}.{extension}"

    # ---- documents -----------------------------------------------------------------------

    async def _document(self, owner: str, conversation_id: str, attachment: DocumentAttachment, n: int) -> Keep:
        where = f"Document attachment {n}"
        if (attachment.content is None) == (attachment.upload_id is None):
            raise FrameRejected("invalid_frame", f"{where} needs exactly one of `content` or `uploadId`.")
        if attachment.content is not None:
            return await self._text(owner, conversation_id, attachment.content, attachment.filename, where)
        with _refusing(where):
            file = await self._files.owned(owner, attachment.upload_id or "")
            if file.is_image:
                raise FrameRejected("invalid_attachment", f"{where}: upload {file.id} is an image; attach it "
                                                          "as an image.")
            doc = await self._documents.parsed(owner, file)

        async def keep() -> Shown:
            with _refusing(where):
                await self._files.attach(owner, conversation_id, file.id)
            return self._document_shown(doc, file)
        return keep

    async def _text(self, owner: str, conversation_id: str, content: str, filename: str | None, where: str) -> Keep:
        """Text the client extracted: small, it goes in as it is; large, it is stored as a text
        file (whatever the original was) to be read with analyze_document."""
        name = filename or "document"
        if len(content) <= self._settings.document_inline_chars:
            text = f"<document filename={json.dumps(name, ensure_ascii=False)}>\n{content}\n</document>"

            async def inline() -> Shown:
                return [{"type": "text", "text": text}], {"type": "document", "filename": name, "chars": len(content)}
            return inline
        data, name = content.encode("utf-8"), _text_name(name)
        with _refusing(where):
            doc = await self._documents.parse(data, "", name)

        async def store() -> Shown:
            with _refusing(where):
                file = await self._files.save(owner, data, name, source="attachment", conversation_id=conversation_id)
                await self._documents.remember(owner, file, doc)
            return self._document_shown(doc, file)
        return store

    def _document_shown(self, doc: ParsedDocument, file: StoredFile) -> Shown:
        text = f"[document {file.id}]\n{render_for_model(doc, inline_limit=self._settings.document_inline_chars)}"
        return [{"type": "text", "text": text}], {
            "type": "document", "fileId": file.id, "url": self._files.url(file), "filename": file.filename,
            "mediaType": file.media_type, "size": file.size, "parts": len(doc.parts), "unit": doc.unit,
            "chars": doc.chars}


async def _all(*steps: Awaitable[Any]) -> list[Any]:
    """Runs the steps concurrently and waits for all of them; then raises the first failure."""
    results = await asyncio.gather(*steps, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return results


def _text_name(name: str) -> str:
    """Text the client extracted is stored as text, whatever the original file was."""
    lower = name.lower()
    return name if lower.endswith((".txt", ".md", ".markdown", ".csv")) else f"{name}.txt"

"""Files: uploads, attached images and documents, generated images, what code wrote.

One `Files` per app. A file belongs to its owner; conversations link to the files they
use. Saving one decides its type from the bytes (chat_agent.sniff), writes the bytes to
the blob store (chat_agent.blobs) under a key made from a generated id, then commits its
row through the store writer and waits for that commit: an id handed out is an id that
can be read back. The bytes go first, so a crash in between leaves an unused blob, never
a row pointing at nothing. Tools see a conversation's files through `ConversationFiles`.

    files = open_files(settings, store, writer)
    stored = await files.save(owner, data, "photo.jpg", conversation_id=cid)
    stored, data = await files.read(owner, stored.id)
"""

from __future__ import annotations

import asyncio
import io
import logging
import re
import time
from dataclasses import dataclass
from typing import get_args

from PIL import Image

from chat_agent.files.blobs import BlobNotFound, Blobs, open_blobs
from chat_agent.config import Settings
from chat_agent.files import png
from chat_agent.files.sniff import EXTENSIONS, IMAGE_TYPES, FileError, sniff
from chat_agent.store import AddFile, AttachFile, FileRecord, FileSource, Store
from chat_agent.store.writer import StoreWriter
from chat_agent.ids import new_id
from chat_agent.text import scrub

__all__ = ["ConversationFiles", "FileError", "Files", "StoredFile", "clean_filename", "open_files"]

log = logging.getLogger(__name__)

SOURCES = get_args(FileSource)
MAX_FILENAME = 200
_DERIVED_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,99}")
_PILLOW_FORMATS = {"image/png": ("PNG",), "image/jpeg": ("JPEG", "MPO"), "image/gif": ("GIF",),
                   "image/webp": ("WEBP",)}


@dataclass(frozen=True, slots=True)
class StoredFile:
    id: str  # "file_" + 24 hex chars
    owner: str
    filename: str
    media_type: str
    size: int
    created_at: float
    source: str  # "upload" | "attachment" | "generated" | "code"
    width: int | None = None  # images only
    height: int | None = None
    key: str = ""  # where the bytes are in the blob store; set on every file Files returns

    @property
    def is_image(self) -> bool:
        return self.media_type in IMAGE_TYPES

    @property
    def extension(self) -> str:
        return EXTENSIONS.get(self.media_type, "")

    @property
    def label(self) -> str:
        """How the model learns a file's id (the image tools and code_interpreter take it)."""
        size = f", {self.width}×{self.height}" if self.width and self.height else ""
        return f"[{'image' if self.is_image else 'document'} {self.id}: {self.filename}{size}]"


def clean_filename(name: str | None) -> str:
    """A name fit to show: no directories, no control or bidi characters, not too long."""
    base = scrub(name or "").replace("\\", "/").rsplit("/", 1)[-1]
    base = "".join(ch for ch in base if ch.isprintable()).strip()
    if len(base) > MAX_FILENAME:
        stem, dot, ext = base.rpartition(".")
        ext = f".{ext}" if dot and len(ext) <= 10 else ""
        base = base[: MAX_FILENAME - len(ext)] + ext
    return base or "file"


class Files:
    def __init__(self, store: Store, writer: StoreWriter, blobs: Blobs, *, max_bytes: int,
                 public_base_url: str | None = None):
        self.store = store
        self.writer = writer
        self.blobs = blobs
        self.max_bytes = max_bytes
        self._public = public_base_url.rstrip("/") if public_base_url else None

    async def save(self, owner: str, data: bytes, filename: str, *, source: str = "upload",
                   conversation_id: str | None = None) -> StoredFile:
        """Stores `data` as a new file (attached to the conversation, if given) once its type
        and size are accepted; FileError "too_large" or "unsupported_type" otherwise."""
        if source not in SOURCES:
            raise ValueError(f"source must be one of {', '.join(SOURCES)}, not {source!r}")
        if len(data) > self.max_bytes:
            raise FileError("too_large", f"The file is {len(data):,} bytes; the limit is {self.max_bytes:,} bytes.")
        name = clean_filename(filename)
        media_type, width, height = await asyncio.to_thread(_inspect, data, name)
        file_id = new_id("file", hex_chars=24)
        record = FileRecord(id=file_id, owner=owner, filename=name, media_type=media_type, size=len(data),
                            source=source, width=width, height=height,  # type: ignore[arg-type]
                            blob_key=f"{file_id}/original{EXTENSIONS[media_type]}", created_at=time.time())
        await self.blobs.put(record.blob_key, data, media_type)
        await self.writer.commit([AddFile(record, conversation_id)])
        return _stored(record)

    async def get(self, owner: str, file_id: str) -> StoredFile | None:
        record = await self.store.get_file(owner, file_id)
        return None if record is None else _stored(record)

    async def read(self, owner: str, file_id: str) -> tuple[StoredFile, bytes]:
        """The file and its bytes; FileError "not_found" if it is missing or someone else's."""
        file = await self.owned(owner, file_id)
        try:
            return file, await self.blobs.get(file.key)
        except BlobNotFound:
            log.error("file %s has a row but no bytes at %r in %r", file.id, file.key, self.blobs)
            raise FileError("not_found", f"The content of file {file.id} is missing from storage.") from None

    async def attach(self, owner: str, conversation_id: str, file_id: str) -> None:
        """Links the owner's file to the conversation (again: no change); FileError "not_found"
        for a file that is missing or someone else's."""
        await self.owned(owner, file_id)
        await self.writer.commit([AttachFile(owner, conversation_id, file_id, time.time())])

    async def in_conversation(self, owner: str, conversation_id: str) -> list[StoredFile]:
        """The conversation's files, oldest first (in the order they were attached)."""
        return [_stored(r) for r in await self.store.conversation_files(owner, conversation_id)]

    async def read_derived(self, owner: str, file_id: str, name: str) -> bytes | None:
        """A blob made from the file (a parsed document, say), or None if none was written."""
        file = await self.owned(owner, file_id)
        try:
            return await self.blobs.get(_derived_key(file.id, name))
        except BlobNotFound:
            return None

    async def write_derived(self, owner: str, file_id: str, name: str, data: bytes) -> None:
        file = await self.owned(owner, file_id)
        await self.blobs.put(_derived_key(file.id, name), data, "application/octet-stream")

    def url(self, file: StoredFile) -> str:
        """Where a client fetches the file: the bucket's public URL when one is configured
        (anyone with the link can read it; ids are unguessable), else our owner-only route."""
        if self._public and file.key:
            return f"{self._public}/{file.key}"
        return f"/api/uploads/{file.id}"

    def scoped(self, owner: str, conversation_id: str) -> ConversationFiles:
        return ConversationFiles(self, owner, conversation_id)

    async def close(self) -> None:
        await self.blobs.close()

    async def owned(self, owner: str, file_id: str) -> StoredFile:
        """The owner's file; FileError "not_found" if it is missing or someone else's."""
        file = await self.get(owner, file_id)
        if file is None:
            raise FileError("not_found", f"There is no file {file_id}.")
        return file


class ConversationFiles:
    """One conversation's view of Files: what a tool gets as `ctx.files`."""

    def __init__(self, files: Files, owner: str, conversation_id: str):
        self.files = files
        self.owner = owner
        self.conversation_id = conversation_id

    async def save(self, data: bytes, filename: str, *, source: str) -> StoredFile:
        """Stores the file and attaches it to this conversation."""
        return await self.files.save(self.owner, data, filename, source=source,
                                     conversation_id=self.conversation_id)

    async def read(self, file_id: str) -> tuple[StoredFile, bytes]:
        """Any file of this owner (ids are unguessable: the model knows only those it was shown)."""
        return await self.files.read(self.owner, file_id)

    async def images(self) -> list[StoredFile]:
        return [f for f in await self._all() if f.is_image]

    async def documents(self) -> list[StoredFile]:
        return [f for f in await self._all() if not f.is_image]

    def url(self, file: StoredFile) -> str:
        return self.files.url(file)

    async def _all(self) -> list[StoredFile]:
        return await self.files.in_conversation(self.owner, self.conversation_id)


def open_files(settings: Settings, store: Store, writer: StoreWriter) -> Files:
    """The app's Files: S3 / R2 when CHAT_AGENT_S3_BUCKET is set, else the data dir."""
    public = settings.s3_public_base_url if settings.s3_bucket else None
    return Files(store, writer, open_blobs(settings), max_bytes=settings.upload_max_bytes, public_base_url=public)


def _stored(r: FileRecord) -> StoredFile:
    return StoredFile(id=r.id, owner=r.owner, filename=r.filename, media_type=r.media_type, size=r.size,
                      created_at=r.created_at, source=r.source, width=r.width, height=r.height, key=r.blob_key)


def _derived_key(file_id: str, name: str) -> str:
    if not _DERIVED_NAME.fullmatch(name):
        raise ValueError(f"invalid derived blob name {name!r}")
    return f"{file_id}/derived/{name}"


def _inspect(data: bytes, name: str) -> tuple[str, int | None, int | None]:
    """Media type, and an image's size from its header (nothing is decoded). CPU-bound."""
    media_type = sniff(data, name)
    if media_type not in IMAGE_TYPES:
        return media_type, None, None
    formats = _PILLOW_FORMATS[media_type]
    try:
        with Image.open(io.BytesIO(png.mend(data)), formats=formats) as image:
            width, height = image.size
    except Image.DecompressionBombError:
        raise FileError("too_large", f"{name!r} declares too many pixels to decode safely.") from None
    except Exception:  # noqa: BLE001 - Pillow's plugins raise many kinds on bad headers
        raise FileError("unsupported_type", f"{name!r} starts like an image, but its header is "
                                            "damaged or truncated.") from None
    if width < 1 or height < 1:
        raise FileError("unsupported_type", f"{name!r} is an image without pixels.")
    return media_type, width, height

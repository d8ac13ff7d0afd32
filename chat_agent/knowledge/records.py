"""The values knowledge bases are made of, as the store keeps them and the API shows them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

Status = Literal["indexing", "ready", "failed"]


class KnowledgeError(Exception):
    """What a caller asked cannot be done; `status` is the HTTP answer, `message` is for the user."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True, slots=True)
class Collection:
    id: str
    owner: str
    name: str
    created_at: float
    documents: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "createdAt": self.created_at, "documents": self.documents}


@dataclass(frozen=True, slots=True)
class Document:
    id: str
    collection_id: str
    owner: str
    file_id: str
    filename: str
    media_type: str
    status: Status
    created_at: float
    error: str | None = None
    pages: int | None = None
    chunks: int = 0
    indexed_at: float | None = None
    runs: int = 0  # times an indexing job began on it: one, however many instances share the queue

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "documentId": self.id, "collectionId": self.collection_id, "uploadId": self.file_id,
                "filename": self.filename, "mediaType": self.media_type, "status": self.status,
                "error": self.error, "pages": self.pages, "chunks": self.chunks, "createdAt": self.created_at,
                "indexedAt": self.indexed_at, "runs": self.runs}


@dataclass(frozen=True, slots=True)
class Chunk:
    """A piece of a document, as indexed: where it is (its page, for a PDF; the heading it
    falls under) and its text."""

    ord: int
    text: str
    page: int | None = None
    heading: str = ""


@dataclass(frozen=True, slots=True)
class Hit:
    """A chunk a search found, with what a citation of it needs."""

    chunk_id: int
    document_id: str
    collection_id: str
    filename: str
    page: int | None
    heading: str
    text: str
    score: float = 0.0

"""A whole conversation as one JSON document, and back (PROTOCOL 1.2 "Find, rename, move
conversations"): every message of every branch in the order they were written, with their
parents and the active leaf; every artifact version; the memories its replies were written
with; the uploads its messages attached, by id.

An import is a new conversation of the caller's whose export equals the document, ids
aside (the conversation's and the artifact's are new; message ids are kept, since they are
only unique within their conversation). Upload ids that are not the caller's are not
honoured: they are left out. The model-facing history is not carried: the new conversation's
is read from its messages' text (tree.py).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from chat_agent import clock
from chat_agent.ids import new_id
from chat_agent.protocol import VisibleMessage
from chat_agent.store import (AddArtifactVersion, AppendHistory, ArtifactVersionRecord, AttachFile, CreateConversation,
                              HistoryItem, SelectArtifactVersion, SetLeaf, SetTitle, Store, StoreWriter)
from chat_agent.store.tree import ROOT

FORMAT = "chat-agent.conversation"
VERSION = 1
MAX_MESSAGES = 20_000
MAX_VERSIONS = 2_000


class _Doc(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, serialize_by_alias=True,
                              extra="ignore")


class ExportedVersion(_Doc):
    index: int = Field(ge=1)
    type: str = Field(pattern="^(text|code)$")
    title: str
    language: str | None = None
    content: str
    created_at: float
    source: str = Field(default="model", pattern="^(model|user)$")


class ExportedArtifact(_Doc):
    current_index: int = Field(ge=1)
    versions: list[ExportedVersion] = Field(min_length=1, max_length=MAX_VERSIONS)


class ExportedUpload(_Doc):
    upload_id: str
    filename: str
    media_type: str
    size: int


class ExportedMemories(_Doc):
    style_rules: list[str] = Field(default_factory=list)
    content: list[str] = Field(default_factory=list)


class Exported(_Doc):
    format: str = Field(default=FORMAT, pattern=f"^{FORMAT}$")
    version: int = VERSION
    title: str | None = None
    leaf_id: str | None = None
    messages: list[dict[str, Any]] = Field(default_factory=list, max_length=MAX_MESSAGES)
    artifact: ExportedArtifact | None = None
    memories: ExportedMemories | None = None
    attachments: list[ExportedUpload] = Field(default_factory=list)


class ImportError_(ValueError):
    """The document is not one this server can import (said to the caller as a 400)."""


async def export_conversation(store: Store, owner: str, conversation_id: str) -> dict[str, Any] | None:
    """The document; None when the conversation is not the owner's. The caller flushes first."""
    record = await store.get_conversation(owner, conversation_id)
    tree = await store.tree(owner, conversation_id)
    if record is None or tree is None:
        return None
    messages = []
    for item in await store.load_history(owner, conversation_id, "visible"):
        message = VisibleMessage.model_validate(item.data)
        node = tree.nodes.get(item.id)
        message.parent_id = node.parent_id if node else None
        if node is not None:
            index, count = tree.branch(item.id)
            message.branch.index, message.branch.count = index, count
        messages.append(message.model_dump(mode="json"))
    artifact = await store.get_artifact(owner, conversation_id)
    exported_artifact = None
    if artifact is not None:
        versions = []
        for index in range(1, artifact.version_count + 1):
            version = await store.get_artifact_version(owner, conversation_id, index)
            if version is not None:
                versions.append(ExportedVersion(index=version.index, type=version.type, title=version.title,
                                                language=version.language, content=version.content,
                                                created_at=version.created_at, source=version.source))
        exported_artifact = ExportedArtifact(current_index=artifact.current_index, versions=versions)
    memories = await store.get_memories(owner)
    files = await store.conversation_files(owner, conversation_id)
    document = Exported(title=record.title, leaf_id=tree.leaf, messages=messages, artifact=exported_artifact,
                        memories=ExportedMemories(style_rules=memories.style_rules, content=memories.content)
                        if memories is not None else None,
                        attachments=[ExportedUpload(upload_id=f.id, filename=f.filename, media_type=f.media_type,
                                                    size=f.size) for f in files])
    return document.model_dump(mode="json")


async def import_conversation(store: Store, writer: StoreWriter, owner: str, body: Any) -> str:
    """Stores the document as a new conversation of `owner`'s; its id. ImportError_ for a
    document that does not hold together (unknown parents, a leaf that is not a message…)."""
    try:
        document = Exported.model_validate(body)
        messages = [VisibleMessage.model_validate(m) for m in document.messages]
    except ValidationError as exc:
        raise ImportError_(f"not a conversation export: {exc.errors()[0]['msg']} at "
                           f"{'.'.join(str(p) for p in exc.errors()[0]['loc'])}") from None
    ids: set[str] = set()
    for message in messages:
        if message.id in ids:
            raise ImportError_(f"message {message.id!r} appears twice")
        if message.parent_id is not None and message.parent_id not in ids:
            raise ImportError_(f"message {message.id!r} names a parent that does not come before it")
        ids.add(message.id)
    if document.leaf_id is not None and document.leaf_id not in ids:
        raise ImportError_("`leafId` is not one of the messages")
    artifact = document.artifact
    if artifact is not None:
        if [v.index for v in artifact.versions] != list(range(1, len(artifact.versions) + 1)):
            raise ImportError_("artifact versions must be numbered 1, 2, 3, … in order")
        if artifact.current_index > len(artifact.versions):
            raise ImportError_("`currentIndex` is not one of the versions")

    conversation_id = new_id(hex_chars=32)
    ops: list[Any] = [CreateConversation(owner, conversation_id, clock.now())]
    if document.title:
        ops.append(SetTitle(owner, conversation_id, document.title))
    items = []
    for message in messages:
        data = message.model_dump(mode="json", exclude_none=True, exclude={"branch"})
        items.append(HistoryItem(message.id, data, 0, len(message.content),
                                 parent_id=ROOT if message.parent_id is None else message.parent_id))
    if items:
        ops.append(AppendHistory(owner, conversation_id, "visible", tuple(items)))
    ops.append(SetLeaf(owner, conversation_id, document.leaf_id))
    if artifact is not None:
        artifact_id = new_id("art")
        for v in artifact.versions:
            ops.append(AddArtifactVersion(owner, conversation_id, artifact_id, ArtifactVersionRecord(
                v.index, v.type, v.title, v.language, v.content, v.created_at, v.source)))  # type: ignore[arg-type]
        ops.append(SelectArtifactVersion(owner, conversation_id, artifact.current_index))
    now = clock.now()
    for upload in document.attachments:  # only the caller's own uploads
        if await store.get_file(owner, upload.upload_id) is not None:
            ops.append(AttachFile(owner, conversation_id, upload.upload_id, now))
    await writer.commit(ops)
    return conversation_id

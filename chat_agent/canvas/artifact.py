"""The conversation's artifact: one per conversation, a list of versions, one of them current.

The current version lives in memory (tools read it on every turn); every change is a new
version written through the store writer and announced to clients. A new version is diffed
against the current one: when the changes are smaller than its content it is announced as
an `artifact_edit` (a span edit on a 1 MB artifact sends its few new characters, not the
megabyte) and stored as a delta (the store decides when a full snapshot is due); otherwise
as `artifact`, the whole state. Older versions are read from the store when asked for.
"""

from __future__ import annotations

from typing import Callable, Literal

from chat_agent import clock, edits
from chat_agent.protocol import ArtifactChange, ArtifactEdit, ArtifactFrame, ArtifactState, ArtifactVersion
from chat_agent.store import (AddArtifactVersion, ArtifactRecord, ArtifactVersionRecord, SelectArtifactVersion,
                              VersionDelta)
from chat_agent.store.writer import StoreWriter
from chat_agent.ids import new_id

ArtifactKind = Literal["text", "code"]
Announcement = ArtifactFrame | ArtifactEdit


def version_model(record: ArtifactVersionRecord) -> ArtifactVersion:
    return ArtifactVersion(index=record.index, type=record.type, title=record.title,
                           language=record.language if record.type == "code" else None, content=record.content)


def artifact_state(record: ArtifactRecord | None) -> ArtifactState | None:
    if record is None:
        return None
    return ArtifactState(id=record.id, current_index=record.current_index,
                         version_count=record.version_count, current=version_model(record.current))


class Canvas:
    def __init__(self, owner: str, conversation_id: str, record: ArtifactRecord | None, writer: StoreWriter, *,
                 history_epoch: Callable[[], int] = lambda: 0):
        self.owner = owner
        self.conversation_id = conversation_id
        self._record = record
        self._writer = writer
        # What clients are to be told of the changes made since whoever publishes them (the
        # running turn, or a command) last took them: see `announcements`.
        self._announcements: list[Announcement] = []
        # The version the model last saw whole (it wrote it, was shown it, or made a known
        # edit to one it had seen) and the epoch of the history it saw it in (a summary or a
        # clear may have dropped it since). A turn shows the current version only when this
        # differs, so the history stays cacheable; its content lets the turn show a change as
        # an edit of what the model saw.
        self._history_epoch = history_epoch
        self._seen = (0, 0)
        self._seen_content: str | None = None
        self.changes = 0  # versions added since the process opened the conversation

    @property
    def current(self) -> ArtifactVersionRecord | None:
        return self._record.current if self._record else None

    @property
    def version_count(self) -> int:
        return self._record.version_count if self._record else 0

    @property
    def current_index(self) -> int:
        """The current version's 1-based index; 0 without an artifact."""
        return self._record.current_index if self._record else 0

    def state(self) -> ArtifactState | None:
        return artifact_state(self._record)

    def unseen(self) -> ArtifactVersionRecord | None:
        """The current version when the model has not seen it whole in the history it now reads."""
        current = self.current
        if current is None or self._seen == (current.index, self._history_epoch()):
            return None
        return current

    def seen(self) -> tuple[int, str] | None:
        """The index and content of the version the model last saw whole, while the history
        it saw it in still stands."""
        if self._seen_content is None or self._seen[1] != self._history_epoch():
            return None
        return self._seen[0], self._seen_content

    def mark_seen(self) -> None:
        """The current version was put in front of the model (whole, or as an edit of one it saw)."""
        if self.current is not None:
            self._seen = (self.current.index, self._history_epoch())
            self._seen_content = self.current.content

    def add_version(self, *, type: ArtifactKind, title: str, language: str | None, content: str,
                    source: Literal["model", "user"], seen_by_model: bool = False) -> ArtifactState:
        """Appends a version (after the last one, whichever is selected) and makes it current.
        `seen_by_model`: the model knows this version (it wrote it whole, or edited one it had
        seen), so it need not be shown it."""
        record = self._record
        base = record.current if record else None
        index = record.version_count + 1 if record else 1
        version = ArtifactVersionRecord(index=index, type=type, title=title.strip() or "Untitled",
                                        language=language if type == "code" else None, content=content,
                                        created_at=clock.now(), source=source)
        artifact_id = record.id if record else new_id("art", hex_chars=16)
        self._record = ArtifactRecord(id=artifact_id, conversation_id=self.conversation_id, current_index=index,
                                      version_count=index, current=version)
        self.changes += 1
        if seen_by_model:
            self.mark_seen()
        changes = edits.diff(base.content, content) if base is not None else []
        delta = VersionDelta(base.index, tuple(changes)) if base is not None else None
        self._writer.submit([AddArtifactVersion(self.owner, self.conversation_id, artifact_id, version, delta)])
        return self._announce(base, changes)

    def select(self, index: int, version: ArtifactVersionRecord) -> ArtifactState:
        """Makes an older (or newer) version current; `version` is that version as stored."""
        assert self._record is not None and version.index == index
        self._record = ArtifactRecord(id=self._record.id, conversation_id=self.conversation_id,
                                      current_index=index, version_count=self._record.version_count,
                                      current=version)
        self._writer.submit([SelectArtifactVersion(self.owner, self.conversation_id, index)])
        return self._announce(None, [])

    def _announce(self, base: ArtifactVersionRecord | None, changes: list[edits.Change]) -> ArtifactState:
        state = self.state()
        assert state is not None
        self._announcements.append(_edit(state, base, changes) or ArtifactFrame(artifact=state))
        return state

    def announcements(self) -> list[Announcement]:
        """The frames that tell clients of the changes since the last call, oldest first. A
        change made by a tool reaches them as an event of the turn's loop; one made by the
        user, from the command that made it."""
        taken, self._announcements = self._announcements, []
        return taken


def _edit(state: ArtifactState, base: ArtifactVersionRecord | None, changes: list[edits.Change]) -> ArtifactEdit | None:
    """The new current version as an edit of `base`, when one says it in fewer characters
    than the content and can say it at all (an edit keeps the type, and has no way to say
    that a language went away)."""
    current = state.current
    if base is None or base.type != current.type or edits.size(changes) >= len(current.content):
        return None
    if current.language != base.language and current.language is None:
        return None
    return ArtifactEdit(artifact_id=state.id, base_index=base.index, index=current.index,
                        changes=[ArtifactChange(start=start, end=end, text=text) for start, end, text in changes],
                        title=current.title if current.title != base.title else None,
                        language=current.language if current.language != base.language else None)

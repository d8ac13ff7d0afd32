"""The conversation's artifact as the client knows it, kept up to date from the frames.

`session` carries the whole current version, `artifact` the whole state, `artifact_edit`
(PROTOCOL 1.1) only the changes from version `baseIndex`: applied when that is the version
the client holds, otherwise the new version is fetched over HTTP
(`GET /api/conversations/{id}/artifact/versions/{index}`).
"""

from __future__ import annotations

from typing import Callable

import httpx

from chat_agent.protocol import (AnyServerFrame, ArtifactEdit, ArtifactFrame, ArtifactState, ArtifactVersion,
                                 SessionFrame)

from .uploads import http_base


class ArtifactView:
    """`state` is the artifact as of frame `seq`: a frame at or below it is already in it
    (a `session` covers everything up to its seq), so a replay does not move it back."""

    def __init__(self, ws_url: str, token: str | None, on_status: Callable[[str], None]):
        self.state: ArtifactState | None = None
        self.seq = 0
        self.fetches = 0  # versions fetched over HTTP because an edit's base was not the one held
        self._ws_url = ws_url
        self._token = token
        self._on_status = on_status

    def reset(self, session: SessionFrame) -> None:
        self.state, self.seq = session.artifact, session.seq or 0

    def rewind(self, after_seq: int) -> None:
        """Frames after `after_seq` are delivered again (an explicit `resume`): follow them again."""
        self.seq = min(self.seq, after_seq)

    async def follow(self, conversation_id: str, frame: AnyServerFrame) -> None:
        if frame.seq is None or frame.seq <= self.seq:
            return
        if isinstance(frame, ArtifactFrame):
            self.state = frame.artifact
        elif isinstance(frame, ArtifactEdit):
            self.state = await self._edited(conversation_id, frame)
        self.seq = frame.seq

    async def _edited(self, conversation_id: str, edit: ArtifactEdit) -> ArtifactState | None:
        if edit.applies_to(self.state):
            assert self.state is not None
            try:
                return edit.apply(self.state)
            except ValueError as exc:  # changes that do not fit: the server holds the truth
                self._on_status(f"artifact edit did not apply ({exc}); fetching version {edit.index}")
        return await self._fetch(conversation_id, edit)

    async def _fetch(self, conversation_id: str, edit: ArtifactEdit) -> ArtifactState | None:
        self.fetches += 1
        headers = {"Authorization": f"Bearer {self._token}"} if self._token else {}
        path = f"/api/conversations/{conversation_id}/artifact/versions/{edit.index}"
        try:
            async with httpx.AsyncClient(base_url=http_base(self._ws_url), timeout=30) as http:
                response = await http.get(path, headers=headers)
            response.raise_for_status()
            version = ArtifactVersion.model_validate(response.json())
        except (httpx.HTTPError, ValueError) as exc:
            # Not fatal to the conversation: the artifact is unknown until the next `artifact`.
            self._on_status(f"could not fetch artifact version {edit.index}: {exc}")
            return None
        return ArtifactState(id=edit.artifact_id, current_index=edit.index, version_count=edit.index,
                             current=version)

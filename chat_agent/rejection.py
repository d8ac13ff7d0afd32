"""The one exception for a client frame the server will not act on."""

from __future__ import annotations

from .protocol import ErrorCode


class FrameRejected(Exception):
    """A well-formed client frame the server will not act on; answered with an `error`
    whose `message` is safe to show the client. `only_sender`: the refusal concerns the
    socket that sent the frame alone (else whatever everyone on the conversation should
    know is published in it, depending on the code)."""

    def __init__(self, code: ErrorCode, message: str, *, only_sender: bool = False):
        super().__init__(message)
        self.code = code
        self.message = message
        self.only_sender = only_sender

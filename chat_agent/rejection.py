"""The one exception for a client frame the server will not act on."""

from __future__ import annotations

from .protocol import ErrorCode


class FrameRejected(Exception):
    """A well-formed client frame the server will not act on; answered with an `error`
    whose `message` is safe to show the client."""

    def __init__(self, code: ErrorCode, message: str):
        super().__init__(message)
        self.code = code
        self.message = message

"""What can go wrong on the client side, split by what the caller should do about it."""

from __future__ import annotations

from chat_agent.protocol import Done, ErrorFrame


class ClientError(Exception):
    """Base of every exception this package raises on purpose."""


class ConnectError(ClientError):
    """The connection could not be opened: refused, rejected handshake, or an `error` instead
    of `session`. `transient` says whether trying again later can help (a refused socket,
    a 5xx) or not (bad token, unknown conversation)."""

    def __init__(self, message: str, *, code: str | None = None, transient: bool = False) -> None:
        super().__init__(message)
        self.code = code
        self.transient = transient


class ConnectionLost(ClientError):
    """An open connection dropped and was not (or could not be) re-established."""


class ProtocolMismatch(ClientError):
    """The server sent something `chat_agent.protocol` does not describe. The server is ours,
    so this is a bug on one side or the other, never something to skip over."""


class ChatError(ClientError):
    """An `error` frame ended a turn. `done` is the `done` that followed it, if any."""

    def __init__(self, frame: ErrorFrame, done: Done | None = None) -> None:
        super().__init__(f"{frame.code}: {frame.message}")
        self.frame = frame
        self.code = frame.code
        self.done = done

"""uvicorn's WebSocket protocol (websockets' sans-I/O one), without what an open socket no
longer needs once its handshake is answered."""

from __future__ import annotations

from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol


class LeanWebSocketProtocol(WebSocketsSansIOProtocol):
    """uvicorn keeps the handshake's request and response (their headers parsed into
    websockets' structures) for the life of the socket: ~3.5 KiB of each idle socket's ~30.
    They are read only until the response is sent; the app reads the request's headers from
    its scope."""

    def start_keepalive(self) -> None:  # called once the handshake response went out
        super().start_keepalive()
        self.request = None  # type: ignore[assignment]
        self.response = None  # type: ignore[assignment]

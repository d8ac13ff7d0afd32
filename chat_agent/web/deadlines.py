"""Deadlines for slow clients, where uvicorn has none: it waits forever for a request's head
(1,000 half-sent requests stayed open) and for its body. Like Apache's mod_reqtimeout:

- the head (request line and headers, a WebSocket's upgrade request too) must be complete
  within `header_timeout` seconds of the connection or of the request's first byte; a
  connection that sends nothing at all is closed as well;
- the body must arrive within `body_timeout` seconds plus one second per `min_rate` bytes
  received, so a large upload at a fair speed finishes, and a trickle does not hold a
  connection (and the memory of what it sent) for ever.

Past a deadline the client gets 408 (when no response has begun) and the connection closes;
the app sees the client gone. The close lingers (as nginx's `lingering_close`): the server
half-closes and discards what the client still sends for a few seconds, because closing a
socket with unread bytes makes the kernel reset it, and a reset can reach the client before
the 408 does. Keep-alive idleness is uvicorn's own `timeout_keep_alive`.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

_CODE = b"HTTP/1.1 408 Request Timeout\r\n"


def deadline_protocol(header_timeout: float, body_timeout: float, min_rate: int) -> type[HttpToolsProtocol]:
    """uvicorn's httptools protocol with these deadlines (pass as `uvicorn.Config(http=...)`)."""

    class DeadlineProtocol(_Deadlines):
        HEADER_TIMEOUT, BODY_TIMEOUT, MIN_RATE = header_timeout, body_timeout, min_rate

    return DeadlineProtocol


class _Deadlines(HttpToolsProtocol):
    HEADER_TIMEOUT: float = 10.0
    BODY_TIMEOUT: float = 20.0
    MIN_RATE: int = 4096
    LINGER: float = 5.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._timer: asyncio.TimerHandle | None = None
        self._body_started = 0.0
        self._body_received = 0
        self._lingering = False

    # ---- the head ----------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm(self.HEADER_TIMEOUT, self._head_late)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._timer is None:  # a further request on a kept-alive connection: its head's clock
            self._arm(self.HEADER_TIMEOUT, self._head_late)

    def on_headers_complete(self) -> None:
        self._disarm()
        super().on_headers_complete()
        self._body_started, self._body_received = self.loop.time(), 0
        if self._expects_body():
            self._arm(self.BODY_TIMEOUT, self._body_check)

    def handle_websocket_upgrade(self) -> None:
        self._disarm()  # the WebSocket protocol takes the connection from here
        super().handle_websocket_upgrade()

    def data_received(self, data: bytes) -> None:
        if not self._lingering:  # past a deadline the rest is read only to be dropped
            super().data_received(data)

    # ---- the body ----------------------------------------------------------------------------

    def on_body(self, body: bytes) -> None:
        self._body_received += len(body)
        super().on_body(body)

    def on_message_complete(self) -> None:
        self._disarm()
        super().on_message_complete()

    def _expects_body(self) -> bool:
        for name, value in self.headers:
            if name == b"content-length":
                return value.strip() not in (b"0", b"")
            if name == b"transfer-encoding":
                return True
        return False

    def _body_check(self) -> None:
        self._timer = None
        due = self._body_started + self.BODY_TIMEOUT + self._body_received / self.MIN_RATE
        if self.loop.time() < due:  # it kept up: look again when its allowance runs out
            self._timer = self.loop.call_at(due, self._body_check)
            return
        self._expire(self.cycle is None or not self.cycle.response_started,
                     f"The request body did not arrive in time ({self._body_received:,} bytes in "
                     f"{self.loop.time() - self._body_started:.0f} s; at least {self.MIN_RATE:,} bytes a second "
                     f"after the first {self.BODY_TIMEOUT:g} s).")

    def _head_late(self) -> None:
        self._timer = None
        self._expire(True, f"The request's headers did not arrive within {self.HEADER_TIMEOUT:g} s.")

    # ---- upkeep ------------------------------------------------------------------------------

    def _arm(self, seconds: float, callback: Any) -> None:
        self._disarm()
        self._timer = self.loop.call_later(seconds, callback)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _expire(self, answer: bool, message: str) -> None:
        """Closes the connection, answering 408 first unless a response has begun."""
        transport = self.transport
        if transport.is_closing() or self._lingering:
            return
        if not answer:  # a response has begun: the client cannot be told more than a cut
            transport.close()
            return
        body = json.dumps({"error": {"code": "invalid_request", "message": message}}).encode()
        transport.write(_CODE + b"content-type: application/json\r\nconnection: close\r\n"
                        + b"content-length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        if self.cycle is not None and not self.cycle.response_complete:
            self.cycle.disconnected = True  # the app's receive() sees the client gone, its send() is dropped
            self.cycle.message_event.set()
        self._lingering = True
        transport.write_eof()  # the 408, then FIN; the client's close (or LINGER) ends it
        transport.resume_reading()
        self._arm(self.LINGER, transport.close)

"""The wire, below the client's state: URL and handshake, frame decoding and encoding,
what a close code means. Functions only, so ChatClient keeps to what it remembers."""

from __future__ import annotations

import asyncio
import json
from urllib.parse import parse_qsl, urlencode, urlsplit

from pydantic import ValidationError
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus, InvalidURI, WebSocketException

from chat_agent.protocol import AnyServerFrame, ClientModel, ErrorFrame, SessionFrame, server_frames

from .errors import ConnectError, ProtocolMismatch

# Close codes after which reconnecting would only repeat the failure: protocol errors
# (ours to fix) and the server's own 4xxx refusals (auth, unknown conversation).
FATAL_CLOSE_CODES = frozenset({1002, 1003, 1007, 1008, 1010})
# Error frames instead of `session` that a retry could cure.
TRANSIENT_CONNECT_CODES = frozenset({"internal", "rate_limited"})


def parse_frame(data: str | bytes) -> AnyServerFrame:
    if isinstance(data, bytes):
        raise ProtocolMismatch(f"server sent a binary frame ({len(data)} bytes); frames are JSON text")
    try:
        return server_frames.validate_json(data)
    except ValidationError as exc:
        raise ProtocolMismatch(f"server frame does not match chat_agent.protocol: {exc}\n"
                               f"frame: {data[:500]}") from exc


def encode(frame: ClientModel) -> str:
    # exclude_unset: only what the caller gave goes on the wire, so server defaults apply.
    return json.dumps(frame.model_dump(mode="json", exclude_unset=True))


def fatal_close(code: int) -> bool:
    return code >= 4000 or code in FATAL_CLOSE_CODES


def describe_close(exc: ConnectionClosed) -> tuple[int, str]:
    if exc.rcvd is None:
        return 1006, "connection dropped without a close frame"
    reason = f": {exc.rcvd.reason}" if exc.rcvd.reason else ""
    return exc.rcvd.code, f"close code {exc.rcvd.code}{reason}"


def full_url(url: str, token: str | None, conversation_id: str | None) -> str:
    """`url` plus `conversationId` and `token` (browsers cannot set headers; we send both)."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query)
    if conversation_id:
        query.append(("conversationId", conversation_id))
    if token:
        query.append(("token", token))
    return parts._replace(query=urlencode(query)).geturl()


async def open_session(url: str, token: str | None, conversation_id: str | None, *,
                       open_timeout: float, max_size: int) -> tuple[ClientConnection, SessionFrame]:
    """Connect and read the first frame, which must be `session`. Errors never name the token."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        ws = await connect(full_url(url, token, conversation_id), compression=None, max_size=max_size,
                           additional_headers=headers, open_timeout=open_timeout)
    except InvalidStatus as exc:
        status = exc.response.status_code
        raise ConnectError(f"{url} refused the connection: HTTP {status}", transient=status >= 500) from exc
    except InvalidURI as exc:
        raise ConnectError(f"not a WebSocket URL: {url}") from exc
    except (OSError, TimeoutError, WebSocketException) as exc:
        raise ConnectError(f"cannot connect to {url}: {exc or type(exc).__name__}", transient=True) from exc
    try:
        return ws, await first_frame(ws, url, open_timeout)
    except BaseException:
        await ws.close()
        raise


async def first_frame(ws: ClientConnection, url: str, timeout: float) -> SessionFrame:
    try:
        async with asyncio.timeout(timeout):
            frame = parse_frame(await ws.recv())
    except TimeoutError:
        raise ConnectError(f"{url} sent no session frame", transient=True) from None
    except ConnectionClosed as exc:
        code, why = describe_close(exc)
        raise ConnectError(f"{url} closed the connection ({why})", transient=not fatal_close(code)) from exc
    if isinstance(frame, ErrorFrame):
        raise ConnectError(f"{frame.code}: {frame.message}", code=frame.code,
                           transient=frame.code in TRANSIENT_CONNECT_CODES)
    if not isinstance(frame, SessionFrame):
        raise ProtocolMismatch(f"first frame was {frame.type!r}, PROTOCOL.md says session")
    return frame

"""The fake's HTTP side: a Starlette app per `FakeBackend`, which holds the script and the log."""

from __future__ import annotations

import inspect
import json
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from tests.fakes.anthropic_default import default_reply
from tests.fakes.anthropic_script import STATUS_FOR_ERROR_TYPE, ApiError, Fault, Item, Reply, Signer, invalid, new_id
from tests.fakes.anthropic_validate import validate_request
from tests.fakes.anthropic_wire import (
    SSE,
    PromptCache,
    materialize,
    message_json,
    output_tokens,
    stream_events,
    total_input_tokens,
)

Responder = Callable[[dict[str, Any]], Any]  # -> Reply | Fault | None (None: default), maybe awaitable
When = Callable[[dict[str, Any]], bool]
API_VERSION = re.compile(r"^\d{4}-\d{2}-\d{2}$")  # SDK 2.x sends newer dates than 2023-06-01


class RecordedRequest(dict):
    """A received request body (the dict itself) plus what the fake did with it."""

    def __init__(self, path: str, headers: dict[str, str]) -> None:
        super().__init__()
        self.path = path
        self.headers = headers
        self.request_id = new_id("req_011C")
        self.status: int | None = None
        self.error: str | None = None  # the error message sent, if any
        self.item: Item | None = None  # the Reply or Fault used
        self.response: dict[str, Any] | None = None  # the full Message the reply stands for
        self.usage: dict[str, Any] | None = None
        self.events_sent = 0
        self.disconnected = False  # the client went away before the response was complete
        self.finished = threading.Event()

    @property
    def body(self) -> dict[str, Any]:
        return dict(self)

    def __repr__(self) -> str:
        return f"<RecordedRequest {self.path} status={self.status} disconnected={self.disconnected}>"


@dataclass
class _Entry:
    item: Item
    when: When | None


class FakeBackend:
    """Script, log and per-server secrets; safe to use from the test thread and the server thread."""

    def __init__(self, keep_log: bool = True) -> None:
        self.signer = Signer()
        self.cache = PromptCache()
        self.keep_log = keep_log
        self.requests: list[RecordedRequest] = []
        self.responder: Responder | None = None
        self._queue: list[_Entry] = []
        self._lock = threading.Lock()
        self.live: set[anyio.CancelScope] = set()  # open responses, ended when the server stops

    def enqueue(self, items: tuple[Item, ...], when: When | None) -> None:
        for item in items:
            if not isinstance(item, Reply | Fault):
                raise TypeError(f"enqueue takes Reply or Fault, not {item!r}")
        with self._lock:
            self._queue += [_Entry(item, when) for item in items]

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._queue)

    def clear(self) -> None:
        with self._lock:
            self._queue.clear()
            self.requests.clear()

    def drop_queue(self) -> None:
        with self._lock:
            self._queue.clear()

    def open_record(self, request: Request) -> RecordedRequest:
        record = RecordedRequest(request.url.path, dict(request.headers))
        if self.keep_log:
            with self._lock:
                self.requests.append(record)
        return record

    async def next_item(self, body: dict[str, Any]) -> Item:
        with self._lock:
            for n, entry in enumerate(self._queue):
                if entry.when is None or entry.when(body):
                    return self._queue.pop(n).item
        return await self.unscripted(body)

    async def unscripted(self, body: dict[str, Any]) -> Item:
        if self.responder is not None:
            item = self.responder(body)
            item = await item if inspect.isawaitable(item) else item
            if item is not None:
                return item
        return default_reply(body)

    async def reply_for_fault(self, fault: Fault, body: dict[str, Any]) -> Reply:
        """The stream a fault cuts: its own reply, else whatever would have been said."""
        item: Item = fault.reply or await self.unscripted(body)
        while isinstance(item, Fault):
            item = item.reply or default_reply(body)
        return item


def build_app(backend: FakeBackend) -> Starlette:
    async def create_message(request: Request) -> Response | _Guarded:
        return await _handle(backend, request, count_tokens=False)

    async def count_tokens(request: Request) -> Response | _Guarded:
        return await _handle(backend, request, count_tokens=True)

    async def not_found(request: Request) -> Response:
        record = backend.open_record(request)
        return error_response(ApiError(404, "not_found_error", "Not found"), record)

    methods = ["GET", "POST", "PUT", "DELETE", "PATCH"]
    return Starlette(
        routes=[
            Route("/v1/messages", create_message, methods=["POST"]),
            Route("/v1/messages/count_tokens", count_tokens, methods=["POST"]),
            Route("/{path:path}", not_found, methods=methods),
        ]
    )


async def _handle(backend: FakeBackend, request: Request, *, count_tokens: bool) -> Response | _Guarded:
    record = backend.open_record(request)
    try:
        _check_headers(request.headers)
        body = await _read_json(request)
        if isinstance(body, dict):
            record.update(body)
        validate_request(body, backend.signer, count_tokens=count_tokens)
        if count_tokens:
            return _json(200, {"input_tokens": total_input_tokens(body)}, record)
        return await _respond(backend, body, record)
    except ApiError as err:
        return error_response(err, record)
    except Exception as err:  # a broken script or fake: say so loudly, the way the API reports its own bugs
        return error_response(ApiError(500, "api_error", f"fake server error: {err!r}"), record)


def _check_headers(headers: Any) -> None:
    auth = headers.get("authorization", "")
    if not headers.get("x-api-key") and not auth.startswith("Bearer "):
        raise ApiError(401, "authentication_error", "x-api-key header is required")
    version = headers.get("anthropic-version")
    if not version:
        raise invalid("anthropic-version: header is required")
    if not API_VERSION.match(version):
        raise invalid(f"anthropic-version: invalid version '{version}'")


async def _read_json(request: Request) -> Any:
    raw = await request.body()
    try:
        body = json.loads(raw)
    except ValueError:
        raise invalid("There was an error parsing the body: invalid JSON") from None
    # The walk over every string of the body, character by character in Python, only where the
    # raw bytes hold a surrogate: it was most of this fake's CPU on long histories, taken from
    # the server under test on a two-core machine.
    lone = _lone_surrogate(raw.decode()) if _SURROGATE_BYTES.search(raw) and _has_surrogate(body) else None
    if lone is not None:
        # Python's json accepts `\ud800`; the real API's parser does not, and says so this way.
        raise invalid(f"The request body is not valid JSON: no low surrogate in string: line 1 column {lone + 1}"
                      f" (char {lone})")
    return body


_SURROGATE_ESCAPE = re.compile(r"\\u[dD]([89a-fA-F])[0-9a-fA-F]{2}")
# an escaped surrogate, or one encoded as UTF-8 bytes (json.loads decodes those with surrogatepass)
_SURROGATE_BYTES = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}|\xed[\xa0-\xbf]")


def _has_surrogate(value: Any) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if any("\ud800" <= ch <= "\udfff" for ch in item):
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def _lone_surrogate(text: str) -> int:
    """Where the first escape of an unpaired surrogate starts (0 if it cannot be told)."""
    escapes = list(_SURROGATE_ESCAPE.finditer(text))
    i = 0
    while i < len(escapes):
        high = escapes[i].group(1).lower() in "89ab"
        paired = (high and i + 1 < len(escapes) and escapes[i + 1].start() == escapes[i].end()
                  and escapes[i + 1].group(1).lower() in "cdef")
        if not paired:
            return escapes[i].start()
        i += 2
    return 0


async def _respond(backend: FakeBackend, body: dict[str, Any], record: RecordedRequest) -> Response | _Guarded:
    item = await backend.next_item(body)
    record.item = item
    if isinstance(item, Fault) and item.kind == "status":
        return error_response(ApiError(item.status_code, item.error_type, item.message), record, item.headers)
    reply = item if isinstance(item, Reply) else await backend.reply_for_fault(item, body)
    message = _message(backend, body, reply)
    record.response, record.usage = message, message["usage"]
    events = stream_events(message, reply)
    cut, hang = _cut(item, reply, len(events))
    if not body.get("stream"):
        return _non_streaming(backend, record, item, message, hang,
                              lead_delay=reply.lead_delay + reply.delay * len(events))
    parts = [e.encode() for e in events[:cut]]
    if isinstance(item, Fault) and item.kind == "midstream_error":
        error = {"type": "error", "error": {"type": item.error_type, "message": item.message}}
        parts.append(SSE("error", error).encode())
    headers = {"content-type": "text/event-stream; charset=utf-8", "cache-control": "no-cache"}
    return _Guarded(backend, record, headers, _Plan(parts, reply.delay, reply.lead_delay, hang=hang))


def _cut(item: Item, reply: Reply, total: int) -> tuple[int, bool]:
    """How many of the reply's events to send, and whether to hang after them."""
    if isinstance(item, Fault):
        return min(item.after_events, total - 1), item.kind == "hang"  # a fault never reaches message_stop
    if reply.hang_after_events is not None:
        return reply.hang_after_events, True
    return total, False


def _message(backend: FakeBackend, body: dict[str, Any], reply: Reply) -> dict[str, Any]:
    content = materialize(reply, backend.signer, body)
    usage = {**backend.cache.usage(body), "output_tokens": output_tokens(content), **(reply.usage or {})}
    return message_json(new_id("msg_01"), reply.model or body["model"], content, reply, usage)


def _non_streaming(
    backend: FakeBackend, record: RecordedRequest, item: Item, message: dict, hang: bool, *, lead_delay: float
) -> Response | _Guarded:
    if isinstance(item, Fault) and item.kind == "midstream_error":
        # Without a stream to break, the same failure can only come back as an HTTP status.
        status = STATUS_FOR_ERROR_TYPE.get(item.error_type, 500)
        return error_response(ApiError(status, item.error_type, item.message), record)
    body = json.dumps(message).encode()
    headers = {"content-type": "application/json"}
    plan = _Plan([] if hang else [body], lead_delay=lead_delay, hang=hang, streaming=False)
    return _Guarded(backend, record, headers, plan)


def _json(status: int, data: dict[str, Any], record: RecordedRequest, headers: dict | None = None) -> Response:
    record.status = status
    record.finished.set()
    return JSONResponse(data, status, headers={"request-id": record.request_id, **(headers or {})})


def error_response(err: ApiError, record: RecordedRequest, headers: dict[str, str] | None = None) -> Response:
    record.error = err.message
    error = {"type": err.error_type, "message": err.message}
    return _json(err.status, {"type": "error", "error": error, "request_id": record.request_id}, record, headers)


@dataclass
class _Plan:
    parts: list[bytes]
    delay: float = 0.0  # seconds between parts
    lead_delay: float = 0.0  # seconds before the first part (a stream's headers too)
    hang: bool = False  # after the parts, wait for the client to leave
    streaming: bool = True  # a stream sends its headers at once (unless told to wait); a plain reply when it is ready


class _Guarded:
    """An ASGI response that watches for the client leaving, as the real API stops generating then.

    Starlette's own StreamingResponse only notices a disconnect on its next write, which a
    hanging stream never makes.
    """

    def __init__(self, backend: FakeBackend, record: RecordedRequest, headers: dict[str, str], plan: _Plan) -> None:
        self.backend, self.record, self.plan = backend, record, plan
        self.headers = [(k.encode(), v.encode()) for k, v in {"request-id": record.request_id, **headers}.items()]
        self._started = self._complete = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        outer = anyio.CancelScope()  # cancelled by the watcher, or by the server stopping
        self.backend.live.add(outer)
        try:
            with outer:
                async with anyio.create_task_group() as group:
                    group.start_soon(self._watch, receive, outer)
                    await self._pump(send)
                    group.cancel_scope.cancel()
        except OSError:
            self.record.disconnected = True
        finally:
            self.backend.live.discard(outer)
            self.record.finished.set()

    async def _pump(self, send: Send) -> None:
        plan = self.plan
        if plan.streaming and not plan.lead_delay:
            await self._start(send)
        await anyio.sleep(plan.lead_delay)
        for n, part in enumerate(plan.parts):
            if n and plan.delay:
                await anyio.sleep(plan.delay)
            await self._start(send)
            await send({"type": "http.response.body", "body": part, "more_body": True})
            self.record.events_sent += 1
        if plan.hang:
            await anyio.sleep_forever()
        await self._start(send)
        self._complete = True
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _start(self, send: Send) -> None:
        if not self._started:
            self._started, self.record.status = True, 200
            await send({"type": "http.response.start", "status": 200, "headers": self.headers})

    async def _watch(self, receive: Receive, scope: anyio.CancelScope) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        if not self._complete:  # uvicorn also reports a disconnect once the response is done
            self.record.disconnected = True
            scope.cancel()

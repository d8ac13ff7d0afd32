"""A fake OpenTelemetry collector: a real OTLP/HTTP trace receiver on loopback.

    with OtlpReceiver() as receiver:
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.base_url}
        ...
        spans = receiver.wait_for(lambda spans: any(s.name == "invoke_agent chat-agent" for s in spans))

It speaks OTLP/HTTP as the collector's receiver does: `POST /v1/traces` with a binary
protobuf `ExportTraceServiceRequest` (gzip-encoded or not), answered 200 with an
`ExportTraceServiceResponse`; a body that does not decode is 400 with a `google.rpc.Status`;
any other content type is 415. (The collector also takes `application/json`; the Python
exporter never sends it, so this fake refuses it like any other type it cannot read.)
What it received is kept as flat `ReceivedSpan`s.
"""

from __future__ import annotations

import gzip
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from google.protobuf.message import DecodeError
from google.rpc import status_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (ExportTraceServiceRequest,
                                                                       ExportTraceServiceResponse)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tests.fakes.loopback import LoopbackServer

PROTOBUF = "application/x-protobuf"
INVALID_ARGUMENT = 3  # google.rpc.Code


@dataclass(frozen=True, slots=True)
class ReceivedSpan:
    trace_id: str  # hex, as W3C traceparent writes it
    span_id: str
    parent_span_id: str  # "" for a root span
    name: str
    kind: str  # "INTERNAL", "CLIENT", …
    attributes: dict[str, Any]
    status: str  # "UNSET", "OK", "ERROR"
    status_message: str
    start_ns: int
    end_ns: int
    resource: dict[str, Any] = field(default_factory=dict)
    scope: str = ""


def value_of(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return tuple(value_of(v) for v in value.array_value.values)
    if kind == "kvlist_value":
        return attributes_of(value.kvlist_value.values)
    return getattr(value, kind) if kind else None


def attributes_of(pairs: Any) -> dict[str, Any]:
    return {pair.key: value_of(pair.value) for pair in pairs}


def _span(span: Span, resource: dict[str, Any], scope: str) -> ReceivedSpan:
    return ReceivedSpan(
        trace_id=span.trace_id.hex(), span_id=span.span_id.hex(), parent_span_id=span.parent_span_id.hex(),
        name=span.name, kind=Span.SpanKind.Name(span.kind).removeprefix("SPAN_KIND_"),
        attributes=attributes_of(span.attributes), status=Status.StatusCode.Name(span.status.code).removeprefix(
            "STATUS_CODE_"), status_message=span.status.message, start_ns=span.start_time_unix_nano,
        end_ns=span.end_time_unix_nano, resource=resource, scope=scope)


class OtlpReceiver(LoopbackServer):
    name = "OTLP receiver"

    def __init__(self) -> None:
        super().__init__()
        self._changed = threading.Condition()
        self._spans: list[ReceivedSpan] = []
        self.requests: list[dict[str, str]] = []  # the headers of each export (lower-case names)
        self.refused: list[int] = []  # statuses of refused exports

    @property
    def traces_url(self) -> str:
        return self.base_url + "/v1/traces"

    def routes(self) -> list[Route]:
        return [Route("/v1/traces", self._export, methods=["POST"])]

    def spans(self) -> list[ReceivedSpan]:
        with self._changed:
            return list(self._spans)

    def clear(self) -> None:
        with self._changed:
            self._spans.clear()
            self.requests.clear()
            self.refused.clear()

    def wait_for(self, done: Callable[[list[ReceivedSpan]], bool], timeout: float = 15.0) -> list[ReceivedSpan]:
        """Every span received once `done(spans)` holds; AssertionError after `timeout` s."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while not done(list(self._spans)):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"the spans did not come: {[s.name for s in self._spans]}")
                self._changed.wait(left)
            return list(self._spans)

    async def _export(self, request: Request) -> Response:
        content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if content_type != PROTOBUF:
            return self._refuse(415, f"unsupported content type {content_type!r}", "text/plain")
        body = await request.body()
        try:
            if request.headers.get("content-encoding", "").lower() == "gzip":
                body = gzip.decompress(body)
            export = ExportTraceServiceRequest.FromString(body)
        except (DecodeError, OSError, EOFError) as exc:
            status = status_pb2.Status(code=INVALID_ARGUMENT, message=f"cannot decode the request: {exc}")
            return self._refuse(400, status.SerializeToString(), PROTOBUF)
        received = [_span(span, attributes_of(rs.resource.attributes), ss.scope.name)
                    for rs in export.resource_spans for ss in rs.scope_spans for span in ss.spans]
        with self._changed:
            self.requests.append(dict(request.headers))
            self._spans.extend(received)
            self._changed.notify_all()
        return Response(ExportTraceServiceResponse().SerializeToString(), media_type=PROTOBUF)

    def _refuse(self, status: int, body: str | bytes, media_type: str) -> Response:
        with self._changed:
            self.refused.append(status)
        return Response(body, status_code=status, media_type=media_type)


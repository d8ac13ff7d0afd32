"""Exporting spans over OTLP, when the standard OpenTelemetry variables ask for it.

`start()` installs the SDK's TracerProvider with a batching OTLP/HTTP exporter only when
`OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set. Otherwise it
imports nothing of the SDK and installs nothing: the spans our code makes are the API's
no-op ones. The SDK and the exporter read the other standard variables themselves
(headers, timeout, compression, certificates, `OTEL_SERVICE_NAME`,
`OTEL_RESOURCE_ATTRIBUTES`, `OTEL_TRACES_SAMPLER`, `OTEL_BSP_*`).

The provider is process-wide (the API allows one per process), so the process entry point
(server.py) calls this, once, and calls `shutdown()` on the way out.
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping

from opentelemetry import trace

if TYPE_CHECKING:  # only then: a server without tracing never loads the SDK for it
    from opentelemetry.sdk.trace import TracerProvider

log = logging.getLogger(__name__)

SERVICE_NAME = "chat-agent"  # the default `service.name`; OTEL_SERVICE_NAME overrides it
ENDPOINTS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
PROTOCOLS = ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")
SUPPORTED_PROTOCOL = "http/protobuf"
SHUTDOWN_SECONDS = 5.0  # the longest the last export may hold up the process's exit


@dataclass(slots=True)
class Tracing:
    """What `start()` set up: the SDK provider it installed, or None when tracing is off."""

    provider: TracerProvider | None = None

    @property
    def enabled(self) -> bool:
        return self.provider is not None

    def shutdown(self, timeout: float = SHUTDOWN_SECONDS) -> None:
        """Exports what is still queued and stops, waiting `timeout` seconds at most: an
        unreachable collector (the exporter retries for up to OTEL_EXPORTER_OTLP_TIMEOUT)
        must not hold up a restart. What it did not take by then is dropped."""
        provider, self.provider = self.provider, None
        if provider is None:
            return
        flush = threading.Thread(target=provider.shutdown, name="otel-shutdown", daemon=True)
        flush.start()
        flush.join(timeout)
        if flush.is_alive():
            log.warning("tracing: the collector did not take the last spans within %g s; they are dropped", timeout)


def exporting() -> bool:
    """Whether spans are recorded at all: an SDK provider is installed (ours or an
    embedder's), not the API's no-op."""
    return not isinstance(trace.get_tracer_provider(), (trace.ProxyTracerProvider, trace.NoOpTracerProvider))


def wanted(environ: Mapping[str, str]) -> str | None:
    """Why tracing stays off with this environment, or None when spans are to be exported."""
    if not any(environ.get(name, "").strip() for name in ENDPOINTS):
        return "no OTEL_EXPORTER_OTLP_ENDPOINT"
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return "OTEL_SDK_DISABLED=true"
    if environ.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none":
        return "OTEL_TRACES_EXPORTER=none"
    protocol = next((environ[name].strip() for name in PROTOCOLS if environ.get(name, "").strip()), SUPPORTED_PROTOCOL)
    if protocol != SUPPORTED_PROTOCOL:
        return f"OTLP protocol {protocol!r} is not supported (use {SUPPORTED_PROTOCOL})"
    return None


def start(environ: Mapping[str, str] | None = None) -> Tracing:
    """Installs OTLP export when the environment asks for it (see the module's docstring).
    The SDK reads its variables from `os.environ`: `environ` is for the decision only, and
    defaults to it."""
    environ = os.environ if environ is None else environ
    why_not = wanted(environ)
    if why_not is not None:
        if why_not != "no OTEL_EXPORTER_OTLP_ENDPOINT":  # asked for, yet off: say so
            log.warning("tracing is off: %s", why_not)
        return Tracing()
    if exporting():
        # An embedder (or `opentelemetry-instrument`) installed one already: our spans go there.
        log.info("tracing: using the TracerProvider already installed")
        return Tracing()
    provider = _provider()
    trace.set_tracer_provider(provider)
    endpoint = next(environ[name] for name in ENDPOINTS if environ.get(name, "").strip())
    log.info("tracing: exporting spans over OTLP/HTTP to %s", endpoint)
    return Tracing(provider)


def _provider() -> TracerProvider:
    # Imported here: a server without tracing never loads the SDK or the exporter.
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    resource = Resource.create()
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
        resource = Resource.create({"service.name": SERVICE_NAME})  # the variables did not name it
    provider = TracerProvider(resource=resource)
    # Spans are queued and exported from the processor's own thread: ending one never waits
    # on the network, so it can never hold up a turn or its abort.
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    return provider

"""Carrying a trace from one instance to another: the W3C `traceparent` (and `tracestate`)
of the current span, as a small dict that travels inside a forwarded command, and back.

The receiving side either starts the turn's span under the context (`turn_span(parent=…)`)
or makes it current while it starts the work (`attached`): tasks created meanwhile copy
it, so spans started in them, the turn's among them, join the sender's trace.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, Mapping

from opentelemetry import context as otel_context
from opentelemetry.context import Context
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

# Always W3C trace context between our own instances, whatever OTEL_PROPAGATORS says for
# the rest of the world: both ends are ours.
_W3C = TraceContextTextMapPropagator()


def inject(context: Context | None = None) -> dict[str, str]:
    """The current span's (or `context`'s) trace as headers; empty when there is none to
    carry (tracing off, or no span)."""
    carrier: dict[str, str] = {}
    _W3C.inject(carrier, context=context)
    return carrier


def extract(carrier: Mapping[str, str] | None) -> Context:
    """A context whose span is the remote one `carrier` names; an empty context for an
    empty or malformed carrier (the work then starts a trace of its own)."""
    return _W3C.extract(dict(carrier or {}), context=Context())


@contextmanager
def attached(context: Context) -> Iterator[None]:
    """Makes `context` current for the block: what starts in it (tasks included) is traced
    under the remote span."""
    token = otel_context.attach(context)
    try:
        yield
    finally:
        otel_context.detach(token)

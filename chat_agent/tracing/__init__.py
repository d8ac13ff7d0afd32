"""OpenTelemetry tracing: a span per turn, per model call and per tool call, exported over
OTLP when the standard variables say where (`OTEL_EXPORTER_OTLP_ENDPOINT`), and otherwise
the API's no-op spans, which cost next to nothing.

    tracing = start()                 # the process's entry point, once; tracing.shutdown() at exit
    with turn_span(conversation_id, turn_id, owner): ...
    with forward_span("message", conversation_id):   # the instance a client sent a command to
        carrier = inject()            # {"traceparent": ...}, sent along with the command
    with attached(extract(carrier)):  # the owner, around starting the work (hub.start_turn):
        ...                           # tasks created here copy the context, so the turn's span
                                      # joins the sender's trace
"""

from chat_agent.tracing._export import Tracing, exporting, start
from chat_agent.tracing._propagation import attached, extract, inject
from chat_agent.tracing._spans import (ModelSpan, ToolSpan, TurnSpan, forward_span, job_span, model_span, tool_span,
                                      turn_span)

__all__ = ["ModelSpan", "ToolSpan", "Tracing", "TurnSpan", "attached", "exporting", "extract", "forward_span", "inject",
           "job_span", "model_span", "start", "tool_span", "turn_span"]

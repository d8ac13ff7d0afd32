"""OpenTelemetry tracing: a span per turn, per model call and per tool call, exported over
OTLP when the standard variables say where (`OTEL_EXPORTER_OTLP_ENDPOINT`), and otherwise
the API's no-op spans, which cost next to nothing.

    tracing = start()                 # the process's entry point, once; tracing.shutdown() at exit
    with turn_span(conversation_id, turn_id, owner): ...
    carrier = inject()                # {"traceparent": ...} to send along a forwarded command
    with attached(extract(carrier)): ...   # on the instance that receives it
"""

from chat_agent.tracing._export import Tracing, exporting, start
from chat_agent.tracing._propagation import attached, extract, inject
from chat_agent.tracing._spans import ModelSpan, ToolSpan, TurnSpan, job_span, model_span, tool_span, turn_span

__all__ = ["ModelSpan", "ToolSpan", "Tracing", "TurnSpan", "attached", "exporting", "extract", "inject", "job_span", "model_span",
           "start", "tool_span", "turn_span"]

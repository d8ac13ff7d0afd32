"""Tracing's own parts: when export is on, trace propagation between instances, and what the
no-op spans cost.

The SDK's provider is process-wide and can be installed once, so whatever installs one runs
in a child process (as the server does), exporting to a real OTLP receiver on loopback.
"""

from __future__ import annotations

import json
import os
import sys
import time

import pytest

from chat_agent import tracing
from chat_agent.protocol import Usage
from chat_agent.tracing._export import wanted
from tests import pace, reaper
from tests.fakes.otlp_receiver import OtlpReceiver
from tests.support import ROOT

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without any OTEL_ variable of the machine's, plus `extra`."""
    return {**{k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}, **extra}


def run_python(code: str, env: dict[str, str], *args: str) -> str:
    done = reaper.run([sys.executable, "-c", code, *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def receiver():
    with OtlpReceiver() as fake:
        yield fake


# ---- when it is on -------------------------------------------------------------------------


def test_export_is_wanted_only_with_an_endpoint():
    assert wanted({}) == "no OTEL_EXPORTER_OTLP_ENDPOINT"
    assert wanted({"OTEL_EXPORTER_OTLP_ENDPOINT": "  "}) == "no OTEL_EXPORTER_OTLP_ENDPOINT"
    assert wanted({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}) is None
    assert wanted({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}) is None
    on = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}
    assert wanted({**on, "OTEL_SDK_DISABLED": "true"}) == "OTEL_SDK_DISABLED=true"
    assert wanted({**on, "OTEL_TRACES_EXPORTER": "none"}) == "OTEL_TRACES_EXPORTER=none"
    assert wanted({**on, "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}) is None
    assert "not supported" in wanted({**on, "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"})
    # the traces-specific variable wins over the general one, as the spec says
    assert wanted({**on, "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"}) is None


OFF_CHECK = """
import sys
import server  # the whole composition, as `python server.py` imports it
from opentelemetry import trace
from chat_agent import tracing
from chat_agent.web.app import create_app
create_app()
started = tracing.start()
with tracing.turn_span("c", "t", "o") as turn:
    with tracing.model_span("m", 10, stream=True) as call:
        call.replied("end_turn", __import__("chat_agent.protocol").protocol.Usage(), "msg_1", "m")
    turn.stopped("end_turn")
import threading
print(started.enabled, tracing.exporting(), type(trace.get_tracer_provider()).__name__,
      sorted(m for m in sys.modules if m.startswith("opentelemetry.exporter")),
      sorted(t.name for t in threading.enumerate() if t is not threading.main_thread()))
"""


def test_without_an_endpoint_nothing_is_installed_or_exported():
    """No provider, no exporter loaded, no export thread. (The SDK's modules may be loaded
    all the same: langsmith, under langchain-core, imports them when they are there.)"""
    out = run_python(OFF_CHECK, clean_env(OTEL_SERVICE_NAME="x", OTEL_EXPORTER_OTLP_HEADERS="a=b")).split(" ", 3)
    assert out == ["False", "False", "ProxyTracerProvider", "[] []\n"]


EXPORT = """
import asyncio, json, sys
from chat_agent import tracing

async def turn(parent=None):
    with tracing.turn_span("conv-1", "turn-1", "someone@example.com", parent=parent) as span:
        print(json.dumps(tracing.inject()))
        span.stopped("end_turn")

async def main(carrier):
    # as an instance receiving a forwarded message starts the turn: the task copies the context
    with tracing.attached(tracing.extract(carrier)):
        task = asyncio.get_running_loop().create_task(turn())
    await task
    await turn(parent=tracing.extract(carrier))  # or explicitly
    await turn()  # nothing carried: a trace of its own

started = tracing.start()
asyncio.run(main(json.loads(sys.argv[1])))
started.shutdown()
"""


def test_a_carried_trace_is_joined_in_another_process(receiver):
    receiver.clear()
    carrier = {"traceparent": TRACEPARENT, "tracestate": "vendor=1"}
    out = run_python(EXPORT, clean_env(OTEL_EXPORTER_OTLP_ENDPOINT=receiver.base_url), json.dumps(carrier))
    sent = [json.loads(line) for line in out.splitlines()]
    spans = receiver.wait_for(lambda spans: len(spans) >= 3)
    assert [s.name for s in spans] == ["invoke_agent chat-agent"] * 3
    joined, explicit, alone = spans
    trace_id, parent_id = TRACEPARENT.split("-")[1:3]
    for span in (joined, explicit):
        assert (span.trace_id, span.parent_span_id) == (trace_id, parent_id)
    assert alone.trace_id != trace_id and alone.parent_span_id == ""
    # what each turn would carry on: its own span, in its trace, with the vendor state kept
    for span, carried in zip(spans, sent):
        assert carried["traceparent"].startswith(f"00-{span.trace_id}-{span.span_id}-")
    assert sent[0]["tracestate"] == "vendor=1"
    assert joined.resource["service.name"] == "chat-agent"  # the default name
    assert joined.attributes["user.hash"] != "someone@example.com" and "someone" not in str(joined.attributes)


SENDER = """
import json
from chat_agent import tracing
started = tracing.start()
with tracing.forward_span("message", "conv-1"):
    print(json.dumps(tracing.inject()))
started.shutdown()
"""


def test_a_forwarded_command_and_the_turn_it_starts_are_one_trace(receiver):
    """Two processes, as two instances: the one a client sent `message` to forwards it with
    its trace; the owner starts the turn under it."""
    receiver.clear()
    env = clean_env(OTEL_EXPORTER_OTLP_ENDPOINT=receiver.base_url)
    carrier = run_python(SENDER, env).strip()
    run_python(EXPORT, env, carrier)
    spans = receiver.wait_for(lambda spans: len(spans) >= 4)
    forward = next(s for s in spans if s.name == "forward message")
    turn = next(s for s in spans if s.name == "invoke_agent chat-agent")
    assert forward.kind == "PRODUCER" and forward.parent_span_id == ""
    assert forward.attributes == {"chat_agent.command": "message", "gen_ai.conversation.id": "conv-1"}
    assert (turn.trace_id, turn.parent_span_id) == (forward.trace_id, forward.span_id)


def test_the_service_name_and_headers_come_from_the_standard_variables(receiver):
    receiver.clear()
    env = clean_env(OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=receiver.traces_url, OTEL_SERVICE_NAME="canvas-prod",
                    OTEL_EXPORTER_OTLP_HEADERS="authorization=Basic cGs6c2s=,x-project=canvas")
    run_python(EXPORT, env, "{}")
    spans = receiver.wait_for(lambda spans: len(spans) >= 3)
    assert {s.resource["service.name"] for s in spans} == {"canvas-prod"}
    assert receiver.requests[0]["authorization"] == "Basic cGs6c2s=" and receiver.requests[0]["x-project"] == "canvas"
    assert len({s.trace_id for s in spans}) == 3  # an empty carrier: each turn a trace of its own


def test_the_receiver_refuses_what_a_collector_would(receiver):
    import httpx
    assert httpx.post(receiver.traces_url, json={"resourceSpans": []}).status_code == 415
    assert httpx.post(receiver.traces_url, content=b"\xff\x00garbage",
                      headers={"content-type": "application/x-protobuf"}).status_code == 400


# ---- propagation without an SDK ------------------------------------------------------------


def test_a_carrier_round_trips_through_a_context():
    carrier = {"traceparent": TRACEPARENT, "tracestate": "vendor=1"}
    with tracing.attached(tracing.extract(carrier)):
        assert tracing.inject() == carrier
    assert tracing.inject() == {}  # detached again, and no span of our own without an SDK
    assert tracing.inject(tracing.extract(carrier)) == carrier


@pytest.mark.parametrize("carrier", [None, {}, {"traceparent": "garbage"},
                                     {"traceparent": "00-00000000000000000000000000000000-00f067aa0ba902b7-01"}])
def test_an_empty_or_broken_carrier_starts_afresh(carrier):
    with tracing.attached(tracing.extract(carrier)):
        assert tracing.inject() == {}


# ---- what it costs when off ----------------------------------------------------------------


def test_the_no_op_spans_of_a_turn_cost_microseconds():
    """One turn's spans (the turn, two model calls, a tool call) with tracing off: a few
    microseconds, against model calls that take hundreds of milliseconds. The bound is
    loose (a loaded machine); the figure is printed for the record."""
    usage = Usage(input_tokens=10, output_tokens=5)

    def one_turn() -> None:
        with tracing.turn_span("conv", "turn", "owner") as turn:
            for _ in range(2):
                with tracing.model_span("claude", 8192, stream=True, server=("api.anthropic.com", 443)) as call:
                    call.first_chunk()
                    call.replied("tool_use", usage, "msg_1", "claude")
            with tracing.tool_span("web_search", "toolu_1") as tool:
                tool.ended(False)
            turn.stopped("end_turn")

    rounds = 2000
    for _ in range(100):
        one_turn()
    started = time.perf_counter()
    for _ in range(rounds):
        one_turn()
    per_turn = (time.perf_counter() - started) / rounds
    print(f"no-op spans of one turn: {per_turn * 1e6:.1f} µs")
    assert per_turn < pace.scaled(0.002)

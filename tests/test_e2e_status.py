"""PROTOCOL 1.2 "Live status" on the wire: the real server on the fake Anthropic API, real
WebSocket clients. A model silent before its first byte gets `status` `waiting_model` frames
every 5 s, a retried call a `status` `retrying`, a model silent past the idle bound an
`llm_error`. `status` frames carry no `seq`, take none from the log and are never stored, so
`resume` does not replay them."""

from __future__ import annotations

import json

import httpx
from jsonschema import Draft202012Validator

from tests.fakes.anthropic_fake import Fault, Reply
from tests.support import connect, recv, send, text_of, until

SILENCE = 12.0  # seconds the model says nothing (the server tells every 5 s)


def statuses(frames: list[dict]) -> list[dict]:
    return [f for f in frames if f["type"] == "status"]


def logged(frames: list[dict]) -> list[dict]:
    return [f for f in frames if f["type"] != "status"]


async def test_a_silent_model_gets_status_frames_without_seq_then_the_reply(server, fake_anthropic):
    ws, session = await connect(server)
    assert "status" in session["features"]
    other, _ = await connect(server, session["conversationId"])  # a second client of the conversation
    fake_anthropic.enqueue(Reply("Sorry for the wait.", lead_delay=SILENCE))
    await send(ws, type="message", content="Are you there?")
    frames = await until(ws, "done", timeout=SILENCE, skip=("title",))
    seen_by_other = await until(other, "done", timeout=SILENCE, skip=("title",))
    done, waiting = frames[-1], statuses(frames)
    assert text_of(frames) == "Sorry for the wait." and done["stopReason"] == "end_turn"
    assert len(waiting) >= 2 and {f["state"] for f in waiting} == {"waiting_model"}, waiting
    assert all("seq" not in f and f["messageId"] == done["messageId"] for f in waiting)
    assert all(f["conversationId"] == session["conversationId"] and f["detail"] for f in waiting)
    elapsed = [f["elapsed"] for f in waiting]
    assert elapsed == sorted(elapsed) and 4.0 <= elapsed[0] and elapsed[-1] <= SILENCE + 1, elapsed
    first_text = next(n for n, f in enumerate(frames) if f["type"] == "content_chunk")
    assert all(frames.index(f) < first_text for f in waiting)  # told while silent, not after
    assert len(statuses(seen_by_other)) == len(waiting)  # every listener is told
    # No seq taken: the log's frames number on without a gap.
    seqs = [f["seq"] for f in logged(frames)]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))
    schema = server.get("/api/protocol")[1]
    validator = Draft202012Validator({"$defs": schema["$defs"], "$ref": "#/$defs/ServerFrame"})
    for frame in waiting:
        validator.validate(frame)

    # Nothing of it was stored: a replay of the whole log (on a socket of its own: one socket
    # gets each seq once) has no status, and the same frames else.
    await ws.close()
    ws, _ = await connect(server, session["conversationId"])
    await send(ws, type="resume", afterSeq=session["seq"])
    replay = await until(ws, "done", skip=("title",))
    assert not statuses(replay) and [f["seq"] for f in replay] == seqs
    await ws.close()
    await other.close()


async def test_an_overloaded_model_then_an_answer_gets_status_retrying(server, fake_anthropic):
    ws, session = await connect(server)
    fake_anthropic.enqueue(Fault.status(529), Reply("After the retry."))
    await send(ws, type="message", content="hello")
    frames = await until(ws, "done", skip=("title",))
    (retrying,) = statuses(frames)
    assert retrying["state"] == "retrying" and "seq" not in retrying
    # the server's test setting: CHAT_AGENT_LLM_MAX_RETRIES=1, so 2 attempts at most
    assert "overloaded (529)" in retrying["detail"] and "attempt 2 of 2" in retrying["detail"]
    assert retrying["messageId"] == frames[-1]["messageId"]
    assert frames.index(retrying) < next(n for n, f in enumerate(frames) if f["type"] == "content_chunk")
    assert text_of(frames) == "After the retry." and frames[-1]["stopReason"] == "end_turn"
    assert not [f for f in frames if f["type"] == "error"]
    # reopened: the stored log has the reply and not the status
    await ws.close()
    ws, _ = await connect(server, session["conversationId"])
    await send(ws, type="resume", afterSeq=0)
    replay = await until(ws, "done", skip=("title",))
    assert not statuses(replay) and text_of(replay) == "After the retry."
    await ws.close()


async def test_ag_ui_runs_are_told_too(server, fake_anthropic):
    fake_anthropic.enqueue(Fault.status(529), Reply("Told over AG-UI."))
    body = {"threadId": "status-thread", "runId": "run-status", "state": {}, "tools": [], "context": [],
            "messages": [{"id": "u1", "role": "user", "content": "hello"}]}
    events = []
    async with httpx.AsyncClient(timeout=30) as client:
        async with client.stream("POST", server.http_url + "/api/ag-ui", json=body) as response:
            async for line in response.aiter_lines():
                if line.startswith("data: "):
                    events.append(json.loads(line[len("data: "):]))
    told = [e for e in events if e["type"] == "CUSTOM" and e["name"] == "status"]
    assert [e["value"]["state"] for e in told] == ["retrying"] and "attempt 2 of 2" in told[0]["value"]["detail"]
    assert events[-1]["type"] == "RUN_FINISHED"


async def test_a_model_silent_past_the_idle_bound_ends_the_turn_with_llm_error(make_server, fake_anthropic):
    server = make_server(CHAT_AGENT_MODEL_IDLE_TIMEOUT="2")
    ws, _ = await connect(server)
    fake_anthropic.enqueue(Reply("Never said.", lead_delay=60))
    await send(ws, type="message", content="hello")
    frames = await until(ws, "done", skip=("title",))
    errors = [f for f in frames if f["type"] == "error"]
    assert [e["code"] for e in errors] == ["llm_error"] and "sent nothing for 2 s" in errors[0]["message"]
    assert frames[-1]["stopReason"] == "error"
    fake_anthropic.enqueue(Reply("Back again."))
    await send(ws, type="message", content="and now?")
    frames = await until(ws, "done", skip=("title",))
    assert text_of(frames) == "Back again." and frames[-1]["stopReason"] == "end_turn"
    assert (await _quiet(ws)) is None
    await ws.close()


async def _quiet(ws) -> dict | None:
    """The next frame within a second, if any (none is expected after `done`)."""
    try:
        return await recv(ws, timeout=1.0)
    except TimeoutError:
        return None

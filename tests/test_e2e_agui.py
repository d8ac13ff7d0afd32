"""AG-UI (PROTOCOL 1.1): `POST /api/ag-ui` runs a turn on the same machinery as the WebSocket
and streams AG-UI events. Driven from Python (each event checked against the ag-ui-protocol
package's types) and by the real AG-UI client (`@ag-ui/client`'s HttpAgent under Node, which
verifies the event sequence itself). The same conversation is visible over the WebSocket."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import jsonpatch
import pytest
from ag_ui.core import Event
from pydantic import TypeAdapter

from tests import node_kit
from tests.fakes.anthropic_fake import Fault, Reply, ToolUse
from tests.support import ROOT, connect, send, until

EVENTS = TypeAdapter(Event)
KIT = ROOT / "tests" / "agui"


def run_body(thread_id: str, text: str, **extra) -> dict:
    return {"threadId": thread_id, "runId": f"run-{thread_id}", "state": {}, "tools": [], "context": [],
            "messages": [{"id": "u1", "role": "user", "content": text}], **extra}


async def ag_ui(server, body: dict, headers: dict | None = None, stop_after: str | None = None) -> list[dict]:
    """The run's events, each one validated by the AG-UI package; `stop_after`: the client
    leaves once that event type arrived."""
    events = []
    async with httpx.AsyncClient(timeout=30) as client:
        async with client.stream("POST", server.http_url + "/api/ag-ui", json=body, headers=headers) as response:
            assert response.status_code == 200, await response.aread()
            assert response.headers["content-type"].startswith("text/event-stream")
            async for line in response.aiter_lines():
                if not line.startswith("data: "):
                    continue
                event = json.loads(line[len("data: "):])
                EVENTS.validate_python(event)
                events.append(event)
                if event["type"] == stop_after:
                    break
    return events


def types(events: list[dict]) -> list[str]:
    return [e["type"] for e in events]


async def test_a_run_streams_text_tools_and_the_canvas(server, fake_anthropic):
    artifact = {"type": "text", "title": "Tides", "content": "High tide at six."}
    fake_anthropic.enqueue(Reply([ToolUse("generate_artifact", artifact)], chunk_size=4),
                           Reply("Here are the **tides**.", chunk_size=3))
    events = await ag_ui(server, run_body("agui-thread-1", "Write down the tides"))
    kinds = types(events)
    assert kinds[:2] == ["RUN_STARTED", "STATE_SNAPSHOT"] and kinds[-1] == "RUN_FINISHED"
    assert events[0]["threadId"] == "agui-thread-1" and events[0]["runId"] == "run-agui-thread-1"
    # A thread name is the caller's own: its conversation's id is derived from the user and the name.
    conversation_id = events[1]["snapshot"]["conversationId"]
    assert events[1]["snapshot"] == {"conversationId": conversation_id, "title": None, "artifact": None}
    assert conversation_id != "agui-thread-1" and len(conversation_id) == 32
    start = kinds.index("TOOL_CALL_START")
    assert kinds[start:start + 3] == ["TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END"]
    assert json.loads(events[start + 1]["delta"]) == artifact
    chunks = [e["value"]["content"] for e in events if e["type"] == "CUSTOM" and e["name"] == "artifact_chunk"]
    assert "".join(chunks) == artifact["content"] and kinds.index("CUSTOM") < start  # live, before the call
    result = events[kinds.index("TOOL_CALL_RESULT")]
    assert result["toolCallId"] == events[start]["toolCallId"] and result["metadata"]["isError"] is False
    delta = events[kinds.index("STATE_DELTA")]["delta"]
    assert any(op["path"] == "/artifact" and op["value"]["current"]["content"] == artifact["content"] for op in delta)
    text = "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert text == "Here are the **tides**."
    assert kinds.index("TEXT_MESSAGE_START") < kinds.index("TEXT_MESSAGE_END") < kinds.index("RUN_FINISHED")
    finished = events[-1]
    assert finished["result"]["stopReason"] == "end_turn" and finished["usage"][0]["inputTokens"] > 0
    assert any(e["type"] == "CUSTOM" and e["name"] == "context" for e in events)

    # The same conversation over the WebSocket, and on from there over AG-UI again.
    ws, session = await connect(server, "agui-thread-1")
    assert [m["role"] for m in session["messages"]] == ["user", "assistant"]
    assert session["messages"][0]["content"] == "Write down the tides"
    assert session["artifact"]["current"]["content"] == artifact["content"]
    fake_anthropic.enqueue(Reply("Second answer."))
    await send(ws, type="message", content="And tomorrow?")
    await until(ws, "done")
    fake_anthropic.enqueue(Reply("Third answer."))
    events = await ag_ui(server, run_body("agui-thread-1", "And the day after?"))
    assert events[1]["snapshot"]["artifact"]["current"]["content"] == artifact["content"]
    assert "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT") == "Third answer."
    # The server keeps the history: the model saw all of it once, the client's copy was not resent.
    sent = fake_anthropic.last_main.body["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "user", "assistant", "user", "assistant", "user"]
    await ws.close()


async def test_refusals_errors_and_a_client_that_leaves(server, fake_anthropic):
    url = server.http_url + "/api/ag-ui"
    async with httpx.AsyncClient(timeout=10) as client:
        bad = await client.post(url, content=b"{not json")
        assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_request"
        body = run_body("agui-thread-2", "hi")
        body["messages"].append({"id": "a1", "role": "assistant", "content": "hello"})
        last = await client.post(url, json=body)
        assert last.status_code == 400 and "user" in last.json()["error"]["message"]
        weird = await client.post(url, json=run_body("no spaces allowed", "hi"))
        assert weird.status_code == 400

    # A model failure ends the run with RUN_ERROR and the code the WebSocket would show.
    fake_anthropic.enqueue(Fault.status(400, message="messages: nope"))
    events = await ag_ui(server, run_body("agui-thread-3", "fail"))
    assert types(events)[-1] == "RUN_ERROR" and events[-1]["code"] == "llm_error"

    # Busy: a turn already runs in the conversation (started over the WebSocket).
    ws, session = await connect(server)
    cid = session["conversationId"]
    fake_anthropic.enqueue(Reply("slow " * 300, chunk_size=5, delay=0.02))
    await send(ws, type="message", content="take your time")
    await until(ws, "content_chunk")
    events = await ag_ui(server, run_body(cid, "me too"))
    assert types(events) == ["RUN_STARTED", "STATE_SNAPSHOT", "RUN_ERROR"] and events[-1]["code"] == "busy"
    await send(ws, type="abort")
    await until(ws, "done")

    # The client closing the request aborts its turn: the WebSocket sees it end as aborted.
    fake_anthropic.enqueue(Reply("slow " * 300, chunk_size=5, delay=0.02))
    events = await ag_ui(server, run_body(cid, "go slowly"), stop_after="TEXT_MESSAGE_CONTENT")
    frames = await until(ws, "done", timeout=10)
    assert frames[-1]["stopReason"] == "aborted"
    await ws.close()


async def test_thread_names_belong_to_their_user(make_server, fake_anthropic):
    """Ann naming a thread first neither blocks Bob's thread of that name nor tells him it
    exists; neither sees the other's; a conversation id of Ann's is no thread of Bob's."""
    server = make_server(CHAT_AGENT_API_KEYS="ann:tok-ann,bob:tok-bob")
    fake_anthropic.enqueue(Reply("Hi Ann."))
    events = await ag_ui(server, run_body("team-notes", "hello"), headers={"Authorization": "Bearer tok-ann"})
    assert types(events)[-1] == "RUN_FINISHED"
    anns = events[1]["snapshot"]["conversationId"]
    fake_anthropic.enqueue(Reply("Hi Bob."))
    events = await ag_ui(server, run_body("team-notes", "mine now"), headers={"Authorization": "Bearer tok-bob"})
    assert types(events)[-1] == "RUN_FINISHED" and events[0]["threadId"] == "team-notes"
    bobs = events[1]["snapshot"]["conversationId"]
    assert bobs != anns and events[1]["snapshot"]["title"] is None  # a new conversation, not Ann's
    # Ann's conversation id used by Bob as a thread name is just another new thread of his.
    fake_anthropic.enqueue(Reply("Still Bob."))
    events = await ag_ui(server, run_body(anns, "let me in"), headers={"Authorization": "Bearer tok-bob"})
    assert events[1]["snapshot"]["conversationId"] not in (anns, bobs)
    async with httpx.AsyncClient(timeout=10) as client:
        nobody = await client.post(server.http_url + "/api/ag-ui", json=run_body("team-notes", "hi"))
        assert nobody.status_code == 401
    for token, reply in (("tok-ann", "Hi Ann."), ("tok-bob", "Hi Bob.")):
        ws, session = await connect(server, "team-notes", token=token)  # the thread's name opens it
        assert [m["content"] for m in session["messages"]][-1] == reply
        await ws.close()
    assert server.get(f"/api/conversations/{anns}", token="tok-bob")[0] == 404
    assert server.get(f"/api/conversations/{anns}", token="tok-ann")[0] == 200


@pytest.fixture(scope="module")
def agui_kit(tmp_path_factory) -> Path:
    """tests/agui with its pinned @ag-ui/client installed."""
    return node_kit.install(KIT, tmp_path_factory.mktemp("agui"), "the AG-UI client check")


async def _node(kit: Path, *args: str) -> dict:
    out = await node_kit.run(kit, "run.mjs", *args, timeout=60)
    return json.loads(out.strip().splitlines()[-1])


async def test_the_real_ag_ui_client_runs_the_agent(server, fake_anthropic, agui_kit):
    artifact = {"type": "code", "title": "hello.py", "language": "python", "content": "print('hi')\n"}
    fake_anthropic.enqueue(Reply([ToolUse("generate_artifact", artifact)]), Reply("Wrote hello.py for you."))
    outcome = await _node(agui_kit, server.http_url + "/api/ag-ui", "agui-js-thread", "write hello.py")
    assert outcome["failure"] is None, outcome
    assert outcome["events"][0] == "RUN_STARTED" and outcome["events"][-1] == "RUN_FINISHED"
    roles = [m["role"] for m in outcome["messages"]]
    assert roles[0] == "user" and "tool" in roles and roles[-1] == "assistant"
    assert outcome["messages"][-1]["content"] == "Wrote hello.py for you."
    calls = [c for m in outcome["messages"] if m["role"] == "assistant" for c in m.get("toolCalls", [])]
    assert calls and calls[0]["function"]["name"] == "generate_artifact"
    assert outcome["state"]["artifact"]["current"]["content"] == artifact["content"]

    # The client's state with the artifact edited (the canvas) is the user's own edit.
    edited = json.loads(json.dumps(outcome["state"]))
    edited["artifact"]["current"]["content"] = "print('hello')\n"
    fake_anthropic.enqueue(Reply("Nice edit."))
    outcome = await _node(agui_kit, server.http_url + "/api/ag-ui", "agui-js-thread", "I edited it",
                          json.dumps({"state": edited}))
    assert outcome["failure"] is None, outcome
    assert outcome["state"]["artifact"]["currentIndex"] == 2
    assert outcome["state"]["artifact"]["current"]["content"] == "print('hello')\n"
    assert "print('hello')" in json.dumps(fake_anthropic.last_main.body["messages"][-1])

    # The client aborting its run (it closes the request) stops the turn on the server.
    ws, session = await connect(server, "agui-js-thread")
    fake_anthropic.enqueue(Reply("slow " * 300, chunk_size=5, delay=0.02))
    outcome = await _node(agui_kit, server.http_url + "/api/ag-ui", "agui-js-thread", "go slowly",
                          json.dumps({"abortAfter": "TEXT_MESSAGE_CONTENT"}))
    assert "TEXT_MESSAGE_CONTENT" in outcome["events"] and "RUN_FINISHED" not in outcome["events"]
    frames = await until(ws, "done", timeout=10)
    assert frames[-1]["stopReason"] == "aborted"
    await ws.close()


async def test_a_history_that_leaves_the_stored_path_starts_a_branch(server, fake_anthropic):
    """PROTOCOL 1.2 trees: RunAgentInput.messages that diverge from the stored path (the user
    edited their second message) make the new message a sibling of the one it replaces; the
    model sees only the path up to there."""
    thread = "agui-branch-thread"
    history: list[dict] = []

    async def run(text: str, reply: str, base: list[dict]) -> list[dict]:
        fake_anthropic.enqueue(Reply(reply))
        messages = [*base, {"id": f"u{len(base)}", "role": "user", "content": text}]
        events = await ag_ui(server, {**run_body(thread, text), "messages": messages})
        assert types(events)[-1] == "RUN_FINISHED", events
        reply_id = next(e["messageId"] for e in events if e["type"] == "TEXT_MESSAGE_START")
        return [*messages, {"id": reply_id, "role": "assistant", "content": reply}]

    history = await run("first question", "first answer", [])
    history = await run("second question", "second answer", history)
    # the client edits its second message: its history is the first exchange only
    await run("second question, edited", "edited answer", history[:2])
    body = fake_anthropic.last_main.body
    sent = [b["text"] for m in body["messages"] for b in (m["content"] if isinstance(m["content"], list)
                                                         else [{"type": "text", "text": m["content"]}])
            if b.get("type") == "text"]
    assert sent == ["first question", "first answer", "second question, edited"]
    ws, session = await connect(server, thread)
    await ws.close()
    assert [m["content"] for m in session["messages"]] == ["first question", "first answer",
                                                          "second question, edited", "edited answer"]
    assert session["messages"][2]["branch"] == {"index": 2, "count": 2}


SEARCH = ToolUse("web_search", {"query": "tide tables"})


def final_state(events: list[dict]) -> dict:
    state = events[1]["snapshot"]
    for event in events:
        if event["type"] == "STATE_DELTA":
            state = jsonpatch.apply_patch(state, event["delta"])
    return state


def finished(events: list[dict]) -> dict:
    assert types(events)[-1] == "RUN_FINISHED", events
    return events[-1]


async def test_approvals_are_interrupts_answered_by_resume(make_server, fake_anthropic):
    """An approval request ends the run with AG-UI's interrupt outcome while the turn waits;
    the next run's `resume` answers it (from any run, like `approve`) and streams the rest."""
    server = make_server(CHAT_AGENT_REQUIRE_APPROVAL="web_search")
    thread = "agui-approval-thread"
    fake_anthropic.enqueue(Reply([SEARCH]), Reply("Found the tides."))
    events = await ag_ui(server, run_body(thread, "When is high tide?"))
    outcome = finished(events)["outcome"]
    start = next(e for e in events if e["type"] == "TOOL_CALL_START")
    assert outcome["type"] == "interrupt" and len(outcome["interrupts"]) == 1
    interrupt = outcome["interrupts"][0]
    assert interrupt["id"] == "approval:" + start["toolCallId"] and interrupt["toolCallId"] == start["toolCallId"]
    assert interrupt["reason"] == "tool_approval" and interrupt["metadata"]["input"] == {"query": "tide tables"}
    assert "approved" in interrupt["responseSchema"]["properties"]
    # The turn goes on waiting (the run ending is no abort): the WebSocket sees the request open.
    ws, session = await connect(server, thread)
    assert session["running"] is True and [p["toolId"] for p in session["pendingApprovals"]] == [start["toolCallId"]]
    assert fake_anthropic.pending == 1

    # A new message while the turn waits is busy, as over the WebSocket.
    again = await ag_ui(server, {**run_body(thread, "hello?"), "resume": []})
    assert types(again)[-1] == "RUN_ERROR" and again[-1]["code"] == "busy"
    history = [{"id": "u1", "role": "user", "content": "When is high tide?"},
               {"id": start["parentMessageId"], "role": "assistant",
                "toolCalls": [{"id": start["toolCallId"], "type": "function",
                               "function": {"name": "web_search", "arguments": "{}"}}]}]
    resume = {**run_body(thread, ""), "messages": history,
              "resume": [{"interruptId": interrupt["id"], "status": "resolved", "payload": {"approved": True}}]}
    events = await ag_ui(server, resume)
    done = finished(events)
    assert done.get("outcome") is None and done["result"]["stopReason"] == "end_turn"
    result = next(e for e in events if e["type"] == "TOOL_CALL_RESULT")
    assert result["toolCallId"] == start["toolCallId"] and result["metadata"]["isError"] is False
    assert "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT") == "Found the tides."
    text_id = next(e["messageId"] for e in events if e["type"] == "TEXT_MESSAGE_START")
    assert text_id != start["parentMessageId"]  # a new assistant message, not the client's one again
    assert (await until(ws, "done"))[-1]["stopReason"] == "end_turn"

    # Cancelled declines, with the user's reason told to the model.
    fake_anthropic.enqueue(Reply([SEARCH]), Reply("Alright, no search."))
    events = await ag_ui(server, run_body(thread, "Search again"))
    interrupt = finished(events)["outcome"]["interrupts"][0]
    events = await ag_ui(server, {**resume, "resume": [{"interruptId": interrupt["id"], "status": "resolved",
                                                        "payload": {"approved": False, "message": "not now"}}]})
    result = next(e for e in events if e["type"] == "TOOL_CALL_RESULT")
    assert result["metadata"]["isError"] is True and "not now" in result["content"]
    assert "not now" in json.dumps(fake_anthropic.last_main.body["messages"][-1])
    assert finished(events)["result"]["stopReason"] == "end_turn"

    # Answers nothing waits for, and answers we cannot read.
    events = await ag_ui(server, {**resume, "resume": [{"interruptId": interrupt["id"], "status": "resolved"}]})
    assert types(events)[-1] == "RUN_ERROR" and events[-1]["code"] == "not_found"
    async with httpx.AsyncClient(timeout=10) as client:
        for entry in ({"interruptId": "what:1", "status": "resolved"},
                      {"interruptId": interrupt["id"], "status": "resolved", "payload": {"approved": "yes"}}):
            bad = await client.post(server.http_url + "/api/ag-ui", json={**resume, "resume": [entry]})
            assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_request"
        # A new message goes in a run of its own, not with the answers (the turn goes on after them).
        bad = await client.post(server.http_url + "/api/ag-ui", json={**run_body(thread, "new"), "resume": [
            {"interruptId": interrupt["id"], "status": "cancelled"}]})
        assert bad.status_code == 400 and "no new user message" in bad.json()["error"]["message"]
    await ws.close()


async def test_a_review_decision_is_an_interrupt(server, fake_anthropic):
    """PROTOCOL 1.2 "Review" with `decision: ask`: the question ends the run as an interrupt
    carrying the reviewer's feedback; `resume` decides."""
    from tests.fakes.anthropic_fake import Verdict
    thread = "agui-review-thread"
    draft = ToolUse("generate_artifact", {"title": "Tides", "type": "text", "content": "Tides rise and fall."})
    fake_anthropic.verdicts(Verdict(False, 0.4, "No conclusion."))
    fake_anthropic.enqueue(Reply([draft]), Reply("Drafted."))
    settings = {"review": {"enabled": True, "maxRevisions": 1, "decision": "ask"}}
    events = await ag_ui(server, run_body(thread, "Write a note on tides", forwardedProps={"settings": settings}))
    interrupt = finished(events)["outcome"]["interrupts"][0]
    assert interrupt["id"].startswith("review:") and interrupt["reason"] == "review_decision"
    assert "No conclusion." in interrupt["message"]
    events = await ag_ui(server, {**run_body(thread, ""), "messages": [],
                                  "resume": [{"interruptId": interrupt["id"], "status": "resolved",
                                              "payload": {"decision": "accept"}}]})
    decided = next(e for e in events if e["type"] == "CUSTOM" and e["name"] == "review_decision")
    assert decided["value"]["decision"] == "accept"
    assert finished(events)["result"]["stopReason"] == "end_turn"
    fake_anthropic.drop_queue()


async def test_client_tools_context_and_a_canvas_edit(server, fake_anthropic):
    """The client's `tools` are offered to the model and run by the client: the run ends at
    the call, the next run's tool message answers it and the turn goes on. `context` reaches
    the model; `state` with an edited artifact is the user's own edit."""
    thread = "agui-client-tools"
    chart = {"name": "show_chart", "description": "Shows a tide chart in the app",
             "parameters": {"type": "object", "properties": {"station": {"type": "string"}}, "required": ["station"]}}
    context = [{"description": "The page the user is on", "value": "Tide chart of Brest"}]
    fake_anthropic.enqueue(Reply([ToolUse("show_chart", {"station": "Brest"})]), Reply("The chart shows high tide."))
    body = run_body(thread, "Show me the chart", tools=[chart], context=context)
    events = await ag_ui(server, body)
    sent = fake_anthropic.last_main.body
    offered = next(t for t in sent["tools"] if t["name"] == "show_chart")
    assert offered["input_schema"] == chart["parameters"] and offered["description"] == chart["description"]
    assert "Tide chart of Brest" in json.dumps(sent["system"])
    start = next(e for e in events if e["type"] == "TOOL_CALL_START")
    assert start["toolCallName"] == "show_chart" and "TOOL_CALL_RESULT" not in types(events)
    done = finished(events)
    assert done.get("outcome") is None and done["result"]["toolCallIds"] == [start["toolCallId"]]

    history = [*body["messages"], {"id": start["parentMessageId"], "role": "assistant",
                                   "toolCalls": [{"id": start["toolCallId"], "type": "function", "function": {
                                       "name": "show_chart", "arguments": '{"station": "Brest"}'}}]},
               {"id": "t1", "role": "tool", "toolCallId": start["toolCallId"], "content": "Chart shown: high at 6"}]
    events = await ag_ui(server, {**body, "messages": history})
    assert finished(events)["result"]["stopReason"] == "end_turn"
    assert "TOOL_CALL_RESULT" not in types(events)  # the client has its own result already
    assert "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT") == "The chart shows high tide."
    results = [b for m in fake_anthropic.last_main.body["messages"] if isinstance(m["content"], list)
               for b in m["content"] if b.get("type") == "tool_result"]
    assert results[-1]["tool_use_id"] == start["toolCallId"] and results[-1]["content"] == "Chart shown: high at 6"
    again = await ag_ui(server, {**body, "messages": history})  # answered already
    assert types(again)[-1] == "RUN_ERROR" and again[-1]["code"] == "not_found"

    # A client tool named like one of the server's is refused.
    clash = await ag_ui(server, run_body(thread, "hi", tools=[{**chart, "name": "web_search"}]))
    assert types(clash)[-1] == "RUN_ERROR" and clash[-1]["code"] == "invalid_frame"

    # The canvas: the client's state with the artifact edited is the user's edit, made first.
    fake_anthropic.enqueue(Reply([ToolUse("generate_artifact", {"type": "text", "title": "Note",
                                                                "content": "High tide at six."})]), Reply("Done."))
    events = await ag_ui(server, run_body(thread, "Write a note"))
    finished(events)
    edited = json.loads(json.dumps(final_state(events)))
    edited["artifact"]["current"]["content"] = "High tide at seven."
    fake_anthropic.enqueue(Reply("Seven it is."))
    events = await ag_ui(server, run_body(thread, "I fixed the time", state=edited))
    finished(events)
    after = final_state(events)["artifact"]
    assert events[1]["snapshot"]["artifact"]["currentIndex"] == 1 and after["currentIndex"] == 2
    assert after["current"]["content"] == "High tide at seven."
    assert "High tide at seven." in json.dumps(fake_anthropic.last_main.body["messages"][-1])
    ws, session = await connect(server, thread)
    assert session["artifact"]["current"]["content"] == "High tide at seven."
    await ws.close()
    # A state made on an older version than the current one is refused, nothing is sent.
    events = await ag_ui(server, run_body(thread, "again", state=edited))
    assert types(events)[-1] == "RUN_ERROR" and events[-1]["code"] == "invalid_frame"


async def test_the_real_ag_ui_client_answers_interrupts_and_runs_its_tools(make_server, fake_anthropic, agui_kit):
    """@ag-ui/client's HttpAgent: an approval arrives as an interrupt (its `pendingInterrupts`),
    the client resumes with `buildResumeArray`; a tool of the client's is called, the client
    runs it and runs again with the result; the model sees it, the client's history is whole."""
    server = make_server(CHAT_AGENT_REQUIRE_APPROVAL="web_search")
    url = server.http_url + "/api/ag-ui"
    fake_anthropic.enqueue(Reply([SEARCH]), Reply("Found the tides."))
    outcome = await _node(agui_kit, url, "agui-js-approval", "When is high tide?",
                          json.dumps({"resume": {"tool_approval": {"approved": True}}}))
    assert outcome["failure"] is None, outcome
    first, second = outcome["runs"]
    assert first["events"][-1] == "RUN_FINISHED" and first["interrupts"][0].startswith("approval:")
    assert "TOOL_CALL_RESULT" in second["events"] and second["events"][-1] == "RUN_FINISHED"
    assert outcome["messages"][-1]["content"] == "Found the tides."

    chart = {"name": "show_chart", "description": "Shows a tide chart in the app",
             "parameters": {"type": "object", "properties": {"station": {"type": "string"}}}}
    fake_anthropic.enqueue(Reply([ToolUse("show_chart", {"station": "Brest"})]), Reply("The chart is up."))
    outcome = await _node(agui_kit, url, "agui-js-tools", "Show the chart", json.dumps({
        "tools": [chart], "context": [{"description": "Page", "value": "the tide chart page"}],
        "toolResults": {"show_chart": "Chart shown"}}))
    assert outcome["failure"] is None, outcome
    first, second = outcome["runs"]
    assert first["toolCalls"] == [{"name": "show_chart", "args": {"station": "Brest"}}]
    assert second["events"][-1] == "RUN_FINISHED" and outcome["messages"][-1]["content"] == "The chart is up."
    assert [m["role"] for m in outcome["messages"]] == ["user", "assistant", "tool", "assistant"]
    assert "the tide chart page" in json.dumps(fake_anthropic.last_main.body["system"])
    results = [b for m in fake_anthropic.last_main.body["messages"] if isinstance(m["content"], list)
               for b in m["content"] if b.get("type") == "tool_result"]
    assert results[-1]["content"] == "Chart shown"


async def test_a_step_with_approvals_and_a_client_call_ends_each_run_once_nothing_runs(make_server, fake_anthropic):
    """Calls of one step that wait for different answers: two approvals and a call to the
    client's tool. Each run ends when nothing of the turn runs any more, asking what is still
    open; answering it all, run after run, finishes the turn with every result in place."""
    server = make_server(CHAT_AGENT_REQUIRE_APPROVAL="web_search")
    thread = "agui-mixed-thread"
    chart = {"name": "show_chart", "description": "Shows a chart", "parameters": {"type": "object"}}
    fake_anthropic.enqueue(Reply([SEARCH, ToolUse("web_search", {"query": "moon phases"}),
                                  ToolUse("show_chart", {})]), Reply("All done."))
    body = run_body(thread, "Search twice and chart it", tools=[chart])
    events = await ag_ui(server, body)
    starts = {e["toolCallName"] + str(i): e["toolCallId"] for i, e in enumerate(
        e for e in events if e["type"] == "TOOL_CALL_START")}
    chart_id = starts["show_chart2"]
    history = [*body["messages"], {"id": "a1", "role": "assistant", "toolCalls": [
        {"id": i, "type": "function", "function": {"name": n[:-1], "arguments": "{}"}} for n, i in starts.items()]}]
    results, texts, answered_chart = set(), [], False
    for _ in range(6):  # each run answers what the last one asked
        done = finished(events)
        results |= {e["toolCallId"] for e in events if e["type"] == "TOOL_CALL_RESULT"}
        texts += [e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT"]
        if done["result"]["stopReason"] != "waiting":
            break
        asked = (done.get("outcome") or {}).get("interrupts", [])
        assert all(i["reason"] == "tool_approval" for i in asked)
        nxt = {**body, "messages": history, "resume": [{"interruptId": i["id"], "status": "resolved"} for i in asked]}
        if not asked:
            assert done["result"]["toolCallIds"] == [chart_id]
            nxt["messages"] = [*history, {"id": "t1", "role": "tool", "toolCallId": chart_id, "content": "charted"}]
            answered_chart = True
        events = await ag_ui(server, nxt)
    assert done["result"]["stopReason"] == "end_turn" and "".join(texts) == "All done." and answered_chart
    assert results == {starts["web_search0"], starts["web_search1"]}  # the chart's result is the client's
    sent = {b["tool_use_id"]: b for m in fake_anthropic.last_main.body["messages"] if isinstance(m["content"], list)
            for b in m["content"] if b.get("type") == "tool_result"}
    assert sent[chart_id]["content"] == "charted" and not any(b.get("is_error") for b in sent.values())

"""Tool approval (PROTOCOL 1.1) from real clients: a call to a tool that needs approval waits
for `approve`; approved it runs, declined (or timed out) the model is told and the turn goes
on; `abort` declines; a reconnecting client finds the open requests in `session`; an answer
nobody asked for is `not_found`; with two instances, `approve` on B reaches the owner A."""

from __future__ import annotations

import time

from tests import pace
from tests.fakes.anthropic_fake import Reply, ToolUse
from tests.instances import instances, moto, s3_env, stored_conversation  # noqa: F401  (fixtures)
from tests.support import connect, recv, send, until
from tests.test_e2e_agui import ag_ui

SEARCH = ToolUse("web_search", {"query": "tide tables"})


def of(frames: list[dict], kind: str) -> list[dict]:
    return [f for f in frames if f["type"] == kind]


def tool_results(body: dict) -> list[dict]:
    return [b for m in body["messages"] if isinstance(m["content"], list) for b in m["content"]
            if b.get("type") == "tool_result"]


async def asked(ws) -> tuple[list[dict], dict]:
    frames = await until(ws, "approval_request", timeout=20)
    return frames, frames[-1]


async def test_approve_decline_and_reconnect(make_server, fake_anthropic):
    server = make_server(CHAT_AGENT_REQUIRE_APPROVAL="web_search")
    ws, session = await connect(server)
    assert "approval" in session["features"] and session["pendingApprovals"] == []
    cid = session["conversationId"]

    # Approved: the request follows the call's tool_start; the tool runs once answered.
    fake_anthropic.enqueue(Reply([SEARCH]), Reply("Found the tides."))
    await send(ws, type="message", content="When is high tide?")
    before, request = await asked(ws)
    start = of(before, "tool_start")[-1]
    assert request["toolId"] == start["toolId"] and request["name"] == "web_search"
    assert request["input"] == {"query": "tide tables"} and request["messageId"] == start["messageId"]
    assert request["seq"] == start["seq"] + 1
    assert fake_anthropic.pending == 1  # nothing ran: the model was not asked again

    # A client that connects now can still answer: the request is in its session.
    ws2, late = await connect(server, cid)
    assert late["running"] is True
    assert late["pendingApprovals"] == [{k: request[k] for k in ("messageId", "toolId", "name", "input")}]

    # Answers nobody asked for: only the sender is told, and both sockets stay.
    await send(ws2, type="approve", toolId="toolu_nobody", approved=True)
    wrong = await recv(ws2)
    assert wrong["type"] == "error" and wrong["code"] == "not_found" and "seq" not in wrong
    await send(ws2, type="approve", toolId=request["toolId"], approved="yes")
    assert (await recv(ws2))["code"] == "invalid_frame"

    await send(ws2, type="approve", toolId=request["toolId"], approved=True)
    frames = await until(ws, "done", timeout=20)
    progress = of(frames, "tool_progress")[0]
    assert progress["toolId"] == request["toolId"] and "pprove" in progress["status"]
    end = of(frames, "tool_end")[0]
    assert not end["isError"] and frames[-1]["stopReason"] == "end_turn"
    assert [f["seq"] for f in await until(ws2, "done")] == [f["seq"] for f in frames]
    await send(ws2, type="approve", toolId=request["toolId"], approved=True)  # answered already
    assert (await recv(ws2))["code"] == "not_found"

    # Declined with a reason: the card says so, the model is told, and the turn goes on.
    fake_anthropic.enqueue(Reply([SEARCH]), Reply("Alright, no search."))
    await send(ws, type="message", content="Search again")
    _, request = await asked(ws)
    await send(ws, type="approve", toolId=request["toolId"], approved=False, message="not on my dime")
    frames = await until(ws, "done", timeout=20)
    end = of(frames, "tool_end")[0]
    assert end["isError"] and "not on my dime" in end["output"]
    assert frames[-1]["stopReason"] == "end_turn"
    result = tool_results(fake_anthropic.last_main.body)[-1]
    assert result["tool_use_id"] == request["toolId"] and result["is_error"] is True
    assert "declined" in str(result["content"]) and "not on my dime" in str(result["content"])

    # A message may ask for more tools than the server does (here the canvas), never fewer.
    artifact = ToolUse("generate_artifact", {"type": "text", "title": "Tides", "content": "High at 6."})
    fake_anthropic.enqueue(Reply([artifact, SEARCH]), Reply("Both done."))
    await send(ws, type="message", content="Write it down and search",
               settings={"requireApproval": ["generate_artifact"]})
    names = set()
    while len(names) < 2:
        frame = await recv(ws, timeout=20)
        if frame["type"] == "approval_request":
            names.add(frame["name"])
            await send(ws, type="approve", toolId=frame["toolId"], approved=True)
    assert names == {"generate_artifact", "web_search"}
    frames = await until(ws, "done", timeout=20)
    assert not any(f["isError"] for f in of(frames, "tool_end")) and of(frames, "artifact")

    # Resume replays the requests with the rest of their turns.
    ws3, _ = await connect(server, cid)
    await send(ws3, type="resume", afterSeq=session["seq"])
    replayed: list[dict] = []
    while len(of(replayed, "done")) < 3:
        replayed.append(await recv(ws3, timeout=10))
    assert len(of(replayed, "approval_request")) == 4
    for sock in (ws, ws2, ws3):
        await sock.close()


async def test_abort_and_timeout_decline(make_server, fake_anthropic):
    server = make_server(CHAT_AGENT_REQUIRE_APPROVAL="*", CHAT_AGENT_APPROVAL_TIMEOUT="1.5")
    ws, session = await connect(server)

    # Not answered in time: declined as timed out, and the turn goes on.
    fake_anthropic.enqueue(Reply([SEARCH]), Reply("I could not search."))
    await send(ws, type="message", content="search please")
    _, request = await asked(ws)
    frames = await until(ws, "done", timeout=20)
    end = of(frames, "tool_end")[0]
    assert end["isError"] and "within 1.5 seconds" in end["output"]
    assert frames[-1]["stopReason"] == "end_turn"
    assert "did not approve" in str(tool_results(fake_anthropic.last_main.body)[-1]["content"])

    # Abort declines the open request at once, and nothing is left pending.
    fake_anthropic.enqueue(Reply([SEARCH]), Reply("never sent"))
    await send(ws, type="message", content="search again")
    _, request = await asked(ws)
    started = time.monotonic()
    await send(ws, type="abort")
    frames = await until(ws, "done", timeout=5)
    assert time.monotonic() - started < pace.scaled(1.0)
    end = of(frames, "tool_end")[0]
    assert end["toolId"] == request["toolId"] and end["isError"]
    assert frames[-1]["stopReason"] == "aborted"
    await send(ws, type="approve", toolId=request["toolId"], approved=True)
    assert (await recv(ws))["code"] == "not_found"
    _, after = await connect(server, session["conversationId"])
    assert after["running"] is False and after["pendingApprovals"] == []
    assert after["messages"][-1]["status"] == "aborted"
    await ws.close()


async def test_approve_on_another_instance_reaches_the_owner(instances, fake_anthropic):
    a, b = instances(2, CHAT_AGENT_REQUIRE_APPROVAL="web_search")
    cid = stored_conversation(a)
    ws_a, session = await connect(a, cid)
    ws_b, _ = await connect(b, cid)
    fake_anthropic.enqueue(Reply([SEARCH]), Reply("Searched from afar."))
    await send(ws_a, type="message", content="search")
    _, request = await asked(ws_b)  # the owner's request, live on B

    # B's session (read from the store) lists it too.
    _, late = await connect(b, cid)
    assert [p["toolId"] for p in late["pendingApprovals"]] == [request["toolId"]]

    await send(ws_b, type="approve", toolId="toolu_nobody", approved=True)
    assert (await recv(ws_b))["code"] == "not_found"
    await send(ws_b, type="approve", toolId=request["toolId"], approved=True)
    frames = await until(ws_a, "done", timeout=20)
    assert not of(frames, "tool_end")[0]["isError"] and frames[-1]["stopReason"] == "end_turn"

    # An AG-UI run posted on B for the conversation A owns: forwarded, and streamed back from B.
    fake_anthropic.enqueue(Reply("Answered through B."))
    events = await ag_ui(b, {"threadId": cid, "runId": "run-b", "messages": [{"id": "u", "role": "user",
                                                                          "content": "over AG-UI"}]})
    assert [e["type"] for e in events][-1] == "RUN_FINISHED"
    assert "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT") == "Answered through B."
    assert (await until(ws_a, "done"))[-1]["stopReason"] == "end_turn"  # the same turn, live on A

    # AG-UI: the run on B ends with the approval as an interrupt; its `resume`, posted on B,
    # reaches the turn A runs.
    fake_anthropic.enqueue(Reply([SEARCH]), Reply("Resumed through B."))
    events = await ag_ui(b, {"threadId": cid, "runId": "run-b2", "messages": [{"id": "u2", "role": "user",
                                                                           "content": "search over AG-UI"}]})
    interrupt = events[-1]["outcome"]["interrupts"][0]
    events = await ag_ui(b, {"threadId": cid, "runId": "run-b3", "messages": [], "resume": [
        {"interruptId": interrupt["id"], "status": "resolved", "payload": {"approved": True}}]})
    assert [e["type"] for e in events][-1] == "RUN_FINISHED" and "outcome" not in events[-1]
    assert "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT") == "Resumed through B."
    frames = await until(ws_a, "done", timeout=20)
    assert not of(frames, "tool_end")[0]["isError"] and frames[-1]["stopReason"] == "end_turn"
    for sock in (ws_a, ws_b):
        await sock.close()

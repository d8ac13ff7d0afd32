"""The AI SDK UI message stream (PROTOCOL 1.2): `POST /api/chat` and `GET /api/chat/{id}/stream`
run turns on the same machinery as the WebSocket. Driven by the AI SDK's own chat client (the
`Chat` logic of the `ai` package on its DefaultChatTransport, under Node: tests/aisdk/run.mjs),
which checks every chunk against the SDK's schema and builds the UI messages itself; and from
Python for what a client library never sends (bad bodies) and the raw wire (headers, chunks)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from tests import node_kit
from tests.fakes.anthropic_fake import Fault, Reply, Thinking, ToolUse
from tests.support import ROOT, connect, send, until

KIT = ROOT / "tests" / "aisdk"
SEARCH = ToolUse("web_search", {"query": "tide tables"})
APPROVAL = {"settings": {"requireApproval": ["web_search"]}}


def user(text: str, id: str = "u1") -> dict:
    return {"id": id, "role": "user", "parts": [{"type": "text", "text": text}]}


async def chunks_of(server, body: dict, headers: dict | None = None) -> tuple[httpx.Headers, list[dict]]:
    """The raw UI message stream of one request: its headers and its chunks ([DONE] last)."""
    chunks = []
    async with httpx.AsyncClient(timeout=30) as client:
        async with client.stream("POST", server.http_url + "/api/chat", json=body, headers=headers) as response:
            assert response.status_code == 200, await response.aread()
            async for line in response.aiter_lines():
                if line.startswith("data: "):
                    chunks.append({"type": "[DONE]"} if line == "data: [DONE]" else json.loads(line[6:]))
            return response.headers, chunks


def kinds(chunks: list[dict]) -> list[str]:
    return [c["type"] for c in chunks]


@pytest.fixture(scope="module")
def aisdk_kit(tmp_path_factory) -> Path:
    """tests/aisdk with its pinned `ai` installed."""
    return node_kit.install(KIT, tmp_path_factory.mktemp("aisdk"), "the AI SDK client check")


async def chat(kit: Path, server, chat_id: str, *steps: dict, token: str | None = None) -> dict:
    """Runs the steps with the SDK's chat client; what it held after each one."""
    script = {"api": server.http_url + "/api/chat", "id": chat_id, "token": token, "steps": list(steps)}
    out = await node_kit.run(kit, "run.mjs", json.dumps(script))
    return json.loads(out.strip().splitlines()[-1])


def parts(message: dict, kind: str) -> list[dict]:
    return [p for p in message["parts"] if p["type"] == kind]


async def test_the_sdk_client_gets_text_reasoning_tools_and_the_canvas(server, fake_anthropic, aisdk_kit):
    artifact = {"type": "text", "title": "Tides", "content": "High tide at six."}
    fake_anthropic.enqueue(Reply([Thinking("The user wants tides."), ToolUse("generate_artifact", artifact)]),
                           Reply("Here are the **tides**.", chunk_size=3))
    result = await chat(aisdk_kit, server, "sdk-chat-1",
                        {"send": "Write down the tides", "body": {"settings": {"thinking": True}}})
    outcome = result["outcomes"][-1]
    assert outcome["status"] == "ready" and outcome["error"] is None, result
    first, reply = outcome["messages"]
    assert first["role"] == "user" and reply["role"] == "assistant"
    assert [p["type"] for p in reply["parts"]] == ["step-start", "reasoning", "tool-generate_artifact",
                                                   "data-artifact", "step-start", "text"]
    assert parts(reply, "reasoning")[0]["text"] == "The user wants tides."
    call = parts(reply, "tool-generate_artifact")[0]
    assert call["state"] == "output-available" and call["input"] == artifact and call["providerExecuted"] is True
    canvas = parts(reply, "data-artifact")[0]["data"]
    assert canvas["current"]["content"] == artifact["content"] and canvas["currentIndex"] == 1
    assert parts(reply, "text")[0] == {"type": "text", "text": "Here are the **tides**.", "state": "done"}
    meta = reply["metadata"]
    assert meta["stopReason"] == "end_turn" and meta["usage"]["outputTokens"] > 0 and meta["seq"] > 0
    names = {part["type"] for part in result["data"]}
    assert {"data-artifact-delta", "data-context"} <= names  # transient: onData only

    # The same conversation over the WebSocket (the reply under the id the SDK client has), and
    # on over the SDK again: the server keeps the history, the model sees it once.
    # A chat opened again (useChat({ messages }) after a reload) has the reply as it was streamed.
    loaded = (await chat(aisdk_kit, server, "sdk-chat-1", {"load": True}))["outcomes"][-1]["messages"]
    assert [m["role"] for m in loaded] == ["user", "assistant"] and loaded[1]["id"] == reply["id"]
    assert parts(loaded[0], "text")[0]["text"] == "Write down the tides"
    assert [p["type"] for p in loaded[1]["parts"] if p["type"] != "data-artifact"] == [
        p["type"] for p in reply["parts"] if p["type"] != "data-artifact"]
    assert parts(loaded[1], "tool-generate_artifact")[0]["output"] == call["output"]
    assert parts(loaded[1], "text") == parts(reply, "text") and loaded[1]["metadata"]["stopReason"] == "end_turn"
    ws, session = await connect(server, meta["conversationId"])
    assert [m["id"] for m in session["messages"]][-1] == reply["id"]
    assert session["artifact"]["current"]["content"] == artifact["content"]
    await ws.close()
    fake_anthropic.enqueue(Reply("Tomorrow at seven."))
    result = await chat(aisdk_kit, server, "sdk-chat-1", {"send": "And tomorrow?"})
    assert parts(result["outcomes"][-1]["messages"][-1], "text")[0]["text"] == "Tomorrow at seven."
    sent = fake_anthropic.last_main.body["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "user", "assistant", "user"]


async def test_approvals_are_the_sdk_approval_parts(server, fake_anthropic, aisdk_kit):
    fake_anthropic.enqueue(Reply([SEARCH]), Reply("Found the tides."), Reply([SEARCH]), Reply("Alright, no search."))
    result = await chat(aisdk_kit, server, "sdk-approval",
                        {"send": "When is high tide?", "body": APPROVAL}, {"approve": True},
                        {"send": "Search again", "body": APPROVAL}, {"approve": False, "reason": "not on my dime"})
    asked, approved, asked_again, declined = result["outcomes"]
    assert result["errors"] == [], result
    # The stream ends while the call waits: the chat holds the request, the turn goes on.
    call = parts(asked["messages"][-1], "tool-web_search")[0]
    assert call["state"] == "approval-requested" and call["approval"]["id"] == call["toolCallId"]
    assert "stopReason" not in asked["messages"][-1]["metadata"]  # not over: it waits
    # Answered: the chat sends it by itself; the same reply goes on, the tool's output in its part.
    messages = approved["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant"]
    call = parts(messages[-1], "tool-web_search")[0]
    assert call["state"] == "output-available" and call["approval"]["approved"] is True
    assert parts(messages[-1], "text")[-1]["text"] == "Found the tides."
    assert messages[-1]["metadata"]["stopReason"] == "end_turn"
    # Declined with a reason: the part says so, the model is told and the turn goes on.
    call = parts(declined["messages"][-1], "tool-web_search")[0]
    assert call["state"] == "output-denied"
    assert parts(declined["messages"][-1], "text")[-1]["text"] == "Alright, no search."
    results = [b for m in fake_anthropic.last_main.body["messages"] if isinstance(m["content"], list)
               for b in m["content"] if b.get("type") == "tool_result"]
    assert "not on my dime" in json.dumps(results[-1])
    assert len(asked_again["messages"]) == 4


async def test_regenerate_and_edit_make_branches(server, fake_anthropic, aisdk_kit):
    fake_anthropic.enqueue(Reply("First answer."), Reply("Second answer."), Reply("Edited answer."))
    result = await chat(aisdk_kit, server, "sdk-branches", {"send": "A question"}, {"regenerate": True},
                        {"edit": "A better question", "index": 0})
    sent, regenerated, edited = result["outcomes"]
    first_reply, second_reply = sent["messages"][-1], regenerated["messages"][-1]
    assert [m["role"] for m in regenerated["messages"]] == ["user", "assistant"]
    assert parts(second_reply, "text")[0]["text"] == "Second answer." and second_reply["id"] != first_reply["id"]
    assert parts(edited["messages"][-1], "text")[0]["text"] == "Edited answer."
    # The tree, as the WebSocket sees it: two replies to the first question, then an edit of it.
    ws, session = await connect(server, first_reply["metadata"]["conversationId"])
    await ws.close()
    question, answer = session["messages"]
    assert question["content"] == "A better question" and question["branch"] == {"index": 2, "count": 2}
    assert answer["content"] == "Edited answer."
    tree = server.get(f"/api/conversations/{session['conversationId']}/tree")[1]
    replies = [m for m in tree["messages"] if m["role"] == "assistant"]
    assert [m["id"] for m in replies][:2] == [first_reply["id"], second_reply["id"]]
    assert replies[1]["parentId"] == replies[0]["parentId"]  # siblings: the same question answered again


async def test_a_dropped_request_resumes_with_the_running_reply(server, fake_anthropic, aisdk_kit):
    text = "slow " * 120
    fake_anthropic.enqueue(Reply(text, chunk_size=5, delay=0.02))
    result = await chat(aisdk_kit, server, "sdk-resume", {"send": "Take your time", "drop": 4})
    dropped, resumed = result["outcomes"]
    assert dropped["status"] == "error" and "network" in dropped["error"]
    shown = "".join(p["text"] for m in dropped["messages"][1:] for p in parts(m, "text"))
    assert len(shown) < len(text)  # cut mid-reply
    assert resumed["status"] == "ready" and resumed["error"] is None, result
    assert [m["role"] for m in resumed["messages"]] == ["user", "assistant"]  # the reply once, not twice
    reply = resumed["messages"][-1]
    assert "".join(p["text"] for p in parts(reply, "text")) == text
    assert reply["metadata"]["stopReason"] == "end_turn"  # the turn went on without its request
    # Nothing runs now: the SDK's resume finds 204 and leaves the chat as it is.
    result = await chat(aisdk_kit, server, "sdk-resume", {"resume": True})
    assert result["outcomes"][-1] == {"status": "ready", "error": None, "messages": []}


async def test_failures_reach_the_sdk_client_as_errors(server, fake_anthropic, aisdk_kit):
    fake_anthropic.enqueue(Fault.status(400, message="messages: nope"))
    result = await chat(aisdk_kit, server, "sdk-fail", {"send": "fail"})
    outcome = result["outcomes"][-1]
    assert outcome["status"] == "error" and outcome["error"], result

    # Busy: a turn already runs in the conversation (started over the WebSocket).
    ws, session = await connect(server)
    fake_anthropic.enqueue(Reply("slow " * 300, chunk_size=5, delay=0.02))
    await send(ws, type="message", content="take your time")
    await until(ws, "content_chunk")
    result = await chat(aisdk_kit, server, session["conversationId"], {"send": "me too"})
    assert result["outcomes"][-1]["status"] == "error" and "running" in result["outcomes"][-1]["error"]
    await send(ws, type="abort")
    await until(ws, "done")
    await ws.close()


async def test_the_wire_bad_bodies_stop_and_resume(server, fake_anthropic):
    fake_anthropic.enqueue(Reply("Hello there."))
    headers, chunks = await chunks_of(server, {"id": "wire-chat", "messages": [user("hi")],
                                               "trigger": "submit-message"})
    assert headers["x-vercel-ai-ui-message-stream"] == "v1" and headers["content-type"].startswith("text/event-stream")
    assert kinds(chunks)[:3] == ["start", "start-step", "text-start"]
    assert kinds(chunks)[-4:] == ["text-end", "finish-step", "finish", "[DONE]"]
    assert "".join(c["delta"] for c in chunks if c["type"] == "text-delta") == "Hello there."
    conversation_id = chunks[0]["messageMetadata"]["conversationId"]
    assert chunks[-2] == {"type": "finish", "finishReason": "stop", "messageMetadata": {
        "conversationId": conversation_id, "seq": chunks[-2]["messageMetadata"]["seq"], "stopReason": "end_turn",
        "usage": chunks[-2]["messageMetadata"]["usage"]}}
    status, stored = server.get(f"/api/conversations/{conversation_id}")
    assert status == 200 and stored["messages"][-1]["id"] == chunks[0]["messageId"]
    url = server.http_url + "/api/chat"
    async with httpx.AsyncClient(timeout=10) as client:
        for body in (b"{not json", json.dumps({"id": "x", "messages": []}).encode(),
                     json.dumps({"id": "x", "messages": [user("hi")], "trigger": "resume"}).encode(),
                     json.dumps({"id": "no spaces", "messages": [user("hi")]}).encode(),
                     json.dumps({"id": "x", "messages": [{"id": "a", "role": "assistant", "parts": []}]}).encode(),
                     json.dumps({"id": "x", "messages": [{"id": "u", "role": "user", "parts": [
                         {"type": "file", "mediaType": "application/pdf", "url": "data:application/pdf;base64,AA=="}]}]
                                 }).encode()):
            bad = await client.post(url, content=body)
            assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_request", body
        assert (await client.get(url + "/nothing-here/stream")).status_code == 204
        assert (await client.get(url + "/wire-chat/stream")).status_code == 204  # nothing runs

        # A running reply: the stream of GET …/stream replays it from its start, then goes on live;
        # DELETE stops it (closing a request does not).
        fake_anthropic.enqueue(Reply("slow " * 300, chunk_size=5, delay=0.02))
        async with client.stream("POST", url, json={"id": "wire-chat", "messages": [user("go slowly", "u2")]}) as r:
            async for line in r.aiter_lines():
                if "text-delta" in line:
                    break
        replay = []
        async with client.stream("GET", url + "/wire-chat/stream") as r:
            assert r.status_code == 200 and r.headers["x-vercel-ai-ui-message-stream"] == "v1"
            async for line in r.aiter_lines():
                if line.startswith("data: {"):
                    replay.append(json.loads(line[6:]))
                    if len(replay) == 6:
                        assert (await client.delete(url + "/wire-chat/stream")).status_code == 204
    assert kinds(replay)[:4] == ["start", "start-step", "text-start", "text-delta"]
    assert replay[-1]["type"] == "finish" and replay[-1]["messageMetadata"]["stopReason"] == "aborted"
    assert "abort" in kinds(replay)


async def test_same_auth_quotas_origins_and_chat_names_per_user(make_server, fake_anthropic):
    """A chat id is the caller's own name (as an AG-UI thread): Ann's chat of a name is not Bob's;
    a turn counts against the quota like a WebSocket message; browsers from other origins are refused."""
    server = make_server(CHAT_AGENT_API_KEYS="ann:tok-ann,bob:tok-bob", CHAT_AGENT_LIMITS="turns_per_minute=1")
    body = {"id": "notes", "messages": [user("hello")]}
    url = server.http_url + "/api/chat"
    async with httpx.AsyncClient(timeout=10) as client:
        assert (await client.post(url, json=body)).status_code == 401
        assert (await client.get(url + "/notes/stream")).status_code == 401
        evil = await client.post(url, json=body, headers={"Origin": "https://evil.example",
                                                          "Authorization": "Bearer tok-ann"})
        assert evil.status_code == 403 and evil.json()["error"]["code"] == "forbidden_origin"
    fake_anthropic.enqueue(Reply("Hi Ann."), Reply("Hi Bob."))
    _, anns = await chunks_of(server, body, {"Authorization": "Bearer tok-ann"})
    _, bobs = await chunks_of(server, body, {"Authorization": "Bearer tok-bob"})
    ann_id, bob_id = (c[0]["messageMetadata"]["conversationId"] for c in (anns, bobs))
    assert ann_id != bob_id and kinds(bobs)[-2] == "finish"
    assert server.get(f"/api/conversations/{ann_id}", token="tok-bob")[0] == 404
    async with httpx.AsyncClient(timeout=10) as client:
        again = await client.post(url, json=body, headers={"Authorization": "Bearer tok-ann"})
        assert again.status_code == 429 and again.json()["error"]["code"] == "rate_limited"
        assert int(again.headers["Retry-After"]) > 0
        # Bob cannot stop Ann's chat: his chat of that name is his own.
        assert (await client.delete(url + f"/{ann_id}/stream", headers={"Authorization": "Bearer tok-bob"})
                ).status_code == 404

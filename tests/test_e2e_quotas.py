"""Per-user quotas (PROTOCOL 1.2 "Quotas", CHAT_AGENT_LIMITS), end to end: one user's burst of
sockets, turns and uploads is refused past the configured limits (`error` `rate_limited` with
`retryAfter` on the WebSocket, 429 + Retry-After on HTTP) while a second user is unaffected;
the model budget of a day; `GET /api/usage`; and the same counts shared by two instances on
PostgreSQL."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
import websockets

from tests.fakes.anthropic_fake import Reply
from tests.instances import instances, moto, s3_env  # noqa: F401  (fixtures)
from tests.support import connect, polled, send, until

KEYS = "ann:tok-ann,bob:tok-bob"


async def _socket(server, token: str) -> tuple[object, dict]:
    return await connect(server, token=token)


async def _open_many(server, token: str, n: int) -> tuple[list, list[dict]]:
    """Opens n sockets at once: the open ones, and the first frames of those refused."""
    results = await asyncio.gather(*(_socket(server, token) for _ in range(n)))
    opened = [ws for ws, first in results if first["type"] == "session"]
    refused = []
    for ws, first in results:
        if first["type"] != "session":
            refused.append(first)
            with pytest.raises(websockets.ConnectionClosed) as closed:
                await ws.recv()
            assert closed.value.rcvd.code == 4429
    return opened, refused


async def _outcome(ws) -> dict:
    """A message's outcome: its turn's `done`, or the `error` that refused it."""
    while True:
        frame = json.loads(await asyncio.wait_for(ws.recv(), 15))
        if frame["type"] in ("done", "error"):
            return frame


async def _close(sockets: list) -> None:
    await asyncio.gather(*(ws.close() for ws in sockets))


async def test_sockets_past_the_limit_are_refused(make_server):
    server = make_server(CHAT_AGENT_API_KEYS=KEYS, CHAT_AGENT_LIMITS="sockets=20")
    opened, refused = await _open_many(server, "tok-ann", 800)
    assert len(opened) == 20 and len(refused) == 780
    assert all(f["code"] == "rate_limited" and f["retryAfter"] >= 1 for f in refused)
    bobs, none = await _open_many(server, "tok-bob", 20)  # the other user is not affected
    assert len(bobs) == 20 and not none
    usage = server.get("/api/usage", token="tok-ann")[1]["quotas"]
    assert usage["sockets"] == {"limit": 20, "used": 20}
    await _close(opened[:5])
    await polled(lambda: server.get("/api/usage", token="tok-ann")[1]["quotas"]["sockets"]["used"] == 15, 10)
    again, _ = await _open_many(server, "tok-ann", 6)
    assert len(again) == 5
    await _close([*opened[5:], *again, *bobs])
    # Nothing was stored: a conversation is stored at its first message, and none was sent.
    listed = server.get("/api/conversations?limit=200", token="tok-ann")[1]["conversations"]
    assert listed == []


async def test_turns_past_the_rate_are_refused_on_the_socket(make_server, fake_anthropic):
    server = make_server(CHAT_AGENT_API_KEYS=KEYS, CHAT_AGENT_LIMITS="turns_per_minute=5")
    fake_anthropic.enqueue(*(Reply("ok", chunk_size=1, delay=0.01) for _ in range(5)))
    sockets = [(await connect(server, token="tok-ann"))[0] for _ in range(5)]
    for i in range(300):  # 300 turns asked for on 5 conversations as fast as the sockets take them
        await send(sockets[i % 5], type="message", content=f"go {i}")
    frames = {}
    for n, ws in enumerate(sockets):
        got = []
        while sum(f["type"] in ("done", "error") for f in got) < 60:
            got.append(json.loads(await asyncio.wait_for(ws.recv(), 15)))
        frames[n] = got
    everything = [f for got in frames.values() for f in got]
    limited = [f for f in everything if f.get("code") == "rate_limited"]
    assert len(limited) == 295 and all(f["retryAfter"] >= 1 for f in limited)
    started = [f for f in everything if f["type"] == "done" or f.get("code") == "busy"]
    assert len(started) == 5, [f for f in everything if f.get("code") != "rate_limited"][:8]  # each passed the quota: a turn, or `busy` behind its own socket's turn
    assert "5 turns a minute" in limited[0]["message"]
    # Bob starts his turn as usual; Ann's sockets stayed open and still answer.
    fake_anthropic.enqueue(Reply("Hi Bob."))
    ws, _ = await connect(server, token="tok-bob")
    await send(ws, type="message", content="hello")
    assert (await until(ws, "done"))[-1]["stopReason"] == "end_turn"
    await send(sockets[0], type="ping")
    assert (await until(sockets[0], "pong"))[-1]["type"] == "pong"
    usage = server.get("/api/usage", token="tok-ann")[1]["quotas"]["turnsPerMinute"]
    assert usage["limit"] == 5 and usage["used"] == 5 and 0 < usage["resetsIn"] <= 60
    await _close([*sockets, ws])


async def test_uploads_past_the_rate_and_the_day_s_bytes_get_429(make_server):
    server = make_server(CHAT_AGENT_API_KEYS=KEYS + ",cat:tok-cat",
                         CHAT_AGENT_LIMITS="uploads_per_minute=10,upload_bytes_per_day=100000")
    async with httpx.AsyncClient(base_url=server.http_url, timeout=30) as client:
        async def up(token: str, size: int = 100) -> httpx.Response:
            return await client.post("/api/uploads", headers={"Authorization": f"Bearer {token}"},
                                     files={"file": ("note.txt", b"x" * size, "text/plain")})

        answers = await asyncio.gather(*(up("tok-ann") for _ in range(200)))
        codes = [a.status_code for a in answers]
        assert codes.count(201) == 10 and codes.count(429) == 190
        refused = next(a for a in answers if a.status_code == 429)
        assert int(refused.headers["Retry-After"]) >= 1
        assert refused.json()["error"]["code"] == "rate_limited" and refused.json()["error"]["limit"] == "uploads_per_minute"
        assert (await up("tok-bob")).status_code == 201
        # The day's bytes: 60 KB fits, another 60 KB does not, and is not kept.
        assert (await up("tok-cat", 60_000)).status_code == 201
        over = await up("tok-cat", 60_000)
        assert over.status_code == 429 and over.json()["error"]["limit"] == "upload_bytes_per_day"
        assert int(over.headers["Retry-After"]) > 3600  # bytes come back over the day
    usage = server.get("/api/usage", token="tok-cat")[1]["quotas"]
    # What was used comes back steadily (a byte every 0.864 s): a moment later, just under 60 KB.
    assert 59_000 < usage["uploadBytesPerDay"]["used"] <= 60_000 and usage["uploadsPerMinute"]["used"] == 2


async def test_the_day_s_model_tokens_and_concurrent_turns(make_server, fake_anthropic):
    server = make_server(CHAT_AGENT_API_KEYS=KEYS, CHAT_AGENT_LIMITS="tokens_per_day=1000,concurrent_turns=1")
    fake_anthropic.enqueue(Reply("slow " * 40, chunk_size=5, delay=0.05), Reply("Second."))
    first, _ = await connect(server, token="tok-ann")
    other, _ = await connect(server, token="tok-ann")
    await send(first, type="message", content="long one")
    await until(first, "content_chunk")
    await send(other, type="message", content="at the same time")  # one turn at a time for Ann
    refused = (await until(other, "error"))[-1]
    assert refused["code"] == "rate_limited" and "at once" in refused["message"]
    done = (await until(first, "done"))[-1]
    assert sum(done["usage"].values()) > 1000  # the fake's prompt and tools alone are more
    await send(other, type="message", content="again")
    refused = (await until(other, "error"))[-1]
    assert refused["code"] == "rate_limited" and "model tokens" in refused["message"]
    assert 1 <= refused["retryAfter"] <= 86_400
    usage = server.get("/api/usage", token="tok-ann")[1]["quotas"]["tokensPerDay"]
    assert usage["used"] == sum(done["usage"].values()) and usage["limit"] == 1000
    # Over AG-UI too: 429 before any stream.
    async with httpx.AsyncClient(timeout=10) as client:
        response = await client.post(server.http_url + "/api/ag-ui", headers={"Authorization": "Bearer tok-ann"},
                                     json={"threadId": "t", "runId": "r", "state": {}, "tools": [], "context": [],
                                           "messages": [{"id": "u", "role": "user", "content": "hi"}]})
    assert response.status_code == 429 and int(response.headers["Retry-After"]) >= 1
    fake_anthropic.enqueue(Reply("Hi Bob."))
    ws, _ = await connect(server, token="tok-bob")
    await send(ws, type="message", content="hello")
    assert (await until(ws, "done"))[-1]["stopReason"] == "end_turn"
    await _close([first, other, ws])


async def test_two_instances_on_postgresql_share_the_counts(instances, fake_anthropic):
    a, b = instances(2, CHAT_AGENT_API_KEYS=KEYS, CHAT_AGENT_LIMITS="sockets=10,turns_per_minute=4")
    on_a, none = await _open_many(a, "tok-ann", 6)
    on_b, refused = await _open_many(b, "tok-ann", 6)
    assert len(on_a) == 6 and not none and len(on_b) == 4 and len(refused) == 2
    bobs, _ = await _open_many(b, "tok-bob", 10)
    assert len(bobs) == 10
    fake_anthropic.enqueue(*(Reply("ok") for _ in range(4)))
    asking = [*on_a[:3], *on_b[:3]]
    for ws in asking:  # six turns asked for across both instances, on six conversations
        await send(ws, type="message", content="go")
    outcomes = [await _outcome(ws) for ws in asking]
    assert sorted(o["type"] for o in outcomes) == ["done"] * 4 + ["error"] * 2, outcomes
    assert all(o["code"] == "rate_limited" for o in outcomes if o["type"] == "error")
    assert a.get("/api/usage", token="tok-ann")[1]["quotas"]["turnsPerMinute"]["used"] == 4
    assert b.get("/api/usage", token="tok-ann")[1]["quotas"]["sockets"]["used"] == 10
    await _close([*on_a, *on_b, *bobs])

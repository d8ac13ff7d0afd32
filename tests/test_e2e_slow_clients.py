"""Slow clients before auth (chat_agent/web/deadlines.py), on raw TCP sockets against the real
server: 1,000 half-sent requests that trickle a header byte now and then, a connection that says
nothing, a WebSocket upgrade never finished, and an upload body sent a few bytes at a time are all
answered 408 and closed soon after their deadline; an upload at a fair speed that takes longer than
the body timeout still succeeds, and the server answers everyone else throughout."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

HEADER, BODY, RATE = 2.0, 2.0, 1000
GRACE = 10.0  # seconds past a deadline the test allows on a loaded machine (before: never closed)


@pytest.fixture
def slow_server(make_server):
    return make_server(CHAT_AGENT_HEADER_TIMEOUT=str(HEADER), CHAT_AGENT_BODY_TIMEOUT=str(BODY),
                       CHAT_AGENT_BODY_MIN_RATE=str(RATE))


async def _closed_by(reader: asyncio.StreamReader, deadline: float) -> bytes:
    """Everything the server sent until it closed the connection; fails past `deadline`."""
    data = b""
    while True:
        chunk = await asyncio.wait_for(reader.read(65536), max(0.1, deadline - time.monotonic()))
        if not chunk:
            return data
        data += chunk


async def _slowloris(port: int, started: float, stop: asyncio.Event) -> tuple[float, bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
    await writer.drain()

    async def trickle() -> None:
        while not stop.is_set():
            await asyncio.sleep(0.5)
            try:
                writer.write(b"a")  # a byte at a time never completes the head
                await writer.drain()
            except (ConnectionError, OSError):
                return

    dripping = asyncio.create_task(trickle())
    try:
        answer = await _closed_by(reader, started + HEADER + GRACE)
        return time.monotonic() - started, answer
    finally:
        dripping.cancel()
        writer.close()


async def test_half_sent_requests_are_closed_at_their_deadline(slow_server):
    stop = asyncio.Event()
    started = time.monotonic()
    results = await asyncio.gather(*(_slowloris(slow_server.port, started, stop) for _ in range(1000)))
    stop.set()
    assert all(answer.startswith(b"HTTP/1.1 408 ") for _, answer in results)
    assert b"did not arrive within 2 s" in results[0][1]
    assert max(elapsed for elapsed, _ in results) < HEADER + GRACE
    assert slow_server.get("/health")[0] == 200


async def test_silent_and_unfinished_websocket_connections_are_closed(slow_server):
    started = time.monotonic()
    silent = await asyncio.open_connection("127.0.0.1", slow_server.port)
    upgrade = await asyncio.open_connection("127.0.0.1", slow_server.port)
    upgrade[1].write(b"GET /api/chat-agent HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
                     b"Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\n")  # no key, no blank line
    await upgrade[1].drain()
    for reader, writer in (silent, upgrade):
        answer = await _closed_by(reader, started + HEADER + GRACE)
        assert answer.startswith(b"HTTP/1.1 408 ")
        writer.close()
    # A kept-alive connection's next request has the same deadline for its head.
    reader, writer = await asyncio.open_connection("127.0.0.1", slow_server.port)
    writer.write(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    first = await asyncio.wait_for(reader.readuntil(b'{"status":"ok"'), 10)
    assert first.startswith(b"HTTP/1.1 200 ")
    writer.write(b"GET /health HTTP/1.1\r\nHost: 127.0")
    started = time.monotonic()
    rest = await _closed_by(reader, started + HEADER + GRACE)
    assert b"408 Request Timeout" in rest
    writer.close()


async def test_a_trickled_body_is_cut_and_a_fair_one_finishes(slow_server):
    boundary = "b0undary"
    head = (f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="a.txt"\r\n'
            "Content-Type: text/plain\r\n\r\n").encode()
    tail = f"\r\n--{boundary}--\r\n".encode()

    def request(size: int) -> bytes:
        return (f"POST /api/uploads HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: multipart/form-data; "
                f"boundary={boundary}\r\nContent-Length: {len(head) + size + len(tail)}\r\n\r\n").encode() + head

    reader, writer = await asyncio.open_connection("127.0.0.1", slow_server.port)
    writer.write(request(100_000))
    started = time.monotonic()
    sent = 0

    async def trickle() -> None:
        nonlocal sent
        while True:
            writer.write(b"x" * 50)  # 100 bytes a second: far under the minimum rate
            sent += 50
            await writer.drain()
            await asyncio.sleep(0.5)

    dripping = asyncio.create_task(trickle())
    try:
        answer = await _closed_by(reader, started + BODY + GRACE)
    finally:
        dripping.cancel()
        writer.close()
    assert answer.startswith(b"HTTP/1.1 408 ") and b"request body did not arrive in time" in answer
    assert time.monotonic() - started < BODY + GRACE and sent < 100_000

    # 60 KB at about 20 KB a second takes three seconds, more than the body timeout: it keeps up.
    async def fair():
        yield head
        for _ in range(12):
            yield b"y" * 5000
            await asyncio.sleep(0.25)
        yield tail

    started = time.monotonic()
    async with httpx.AsyncClient(timeout=30) as client:
        response = await client.post(slow_server.http_url + "/api/uploads", content=fair(),
                                     headers={"Content-Type": f"multipart/form-data; boundary={boundary}",
                                              "Content-Length": str(len(head) + 60_000 + len(tail))})
    assert response.status_code == 201, response.text
    assert response.json()["size"] == 60_000 and time.monotonic() - started > BODY

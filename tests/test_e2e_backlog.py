"""Clients that stop reading cannot pin the server's memory: past the per-connection or the
total backlog limit the client furthest behind is dropped (1013), can `resume`, and clients
that keep up see every frame."""

from __future__ import annotations

import asyncio
import json
import socket

import websockets

from tests.fakes.anthropic_fake import Reply
from tests.support import connect, recv, send, text_of, until

# 12 MB of frames for every client of the conversation: more than a stalled socket's kernel
# buffers take in (up to 4 MB on Linux) before what is sent piles up in the server.
TEXT = "x" * 12_000_000
# Above what a client that keeps up may lag by while the server is busy (up to ~1 MB seen).
# Three stalled clients grow together, so the total drops the first two (at ~1.3 and ~2 MB
# each); the last one must then reach its own limit while the total, which also counts the
# fast client's lag, is still under 4 MB: hence 2.5 MB, leaving that lag 1.5 MB.
LIMITS = {"CHAT_AGENT_MAX_BACKLOG_BYTES": str(4_000_000), "CHAT_AGENT_MAX_CONNECTION_BACKLOG_BYTES": str(2_500_000),
          # A stalled socket takes no pong either: on a busy machine, where the 12 MB take
          # longer than a keepalive's 40 s, the keepalive would drop it first (1006, not 1013).
          "CHAT_AGENT_WS_PING_INTERVAL": "600"}


async def stalled(server, conversation_id: str):
    """A client that reads its `session` and then nothing: a tiny receive window, and a
    library queue of one message, so what the server sends piles up on the server."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", server.port))
    ws = await websockets.connect(f"{server.ws_url}?conversationId={conversation_id}", sock=sock,
                                  compression=None, max_size=None, max_queue=1, ping_interval=None)
    assert json.loads(await ws.recv())["type"] == "session"
    return ws


async def drain(ws) -> list[dict]:
    """Everything a stalled client still gets once it reads again, up to the close."""
    frames = []
    try:
        while True:
            frames.append(json.loads(await asyncio.wait_for(ws.recv(), 10)))
    except websockets.ConnectionClosed:
        return frames


async def test_slow_readers_are_dropped_and_fast_ones_see_everything(make_server, fake_anthropic):
    server = make_server(**LIMITS)
    fast, session = await connect(server)
    conversation_id = session["conversationId"]
    slow = [await stalled(server, conversation_id) for _ in range(3)]
    fake_anthropic.enqueue(Reply(TEXT, chunk_size=5000, delay=0.003))
    await send(fast, type="message", content="a long one")
    frames = await until(fast, "done", timeout=60)
    assert text_of(frames) == TEXT and frames[-1]["stopReason"] == "end_turn"
    assert [f["seq"] for f in frames] == list(range(1, len(frames) + 1))

    for ws in slow:
        got = await drain(ws)
        assert ws.close_code == 1013, ws.close_code  # behind: reconnect and resume
        seqs = [f["seq"] for f in got]
        assert seqs == list(range(1, len(seqs) + 1)) and len(got) < len(frames)
        again, snapshot = await connect(server, conversation_id)
        await send(again, type="resume", afterSeq=seqs[-1] if seqs else 0)
        rest = await until(again, "done")
        assert text_of(got + rest) == TEXT
        await again.close()
    log = server.log()
    assert "over the server's total" in log and "over its own limit" in log
    assert server.get("/health")[0] == 200
    await send(fast, type="ping")
    assert (await recv(fast))["type"] == "pong"
    await fast.close()

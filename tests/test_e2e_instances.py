"""Several real server processes on one PostgreSQL (PROTOCOL 1.1 "Several instances"): any
instance serves any conversation. A turn started on A streams live to a client on B, whose
`session` says it runs; `abort`, `message` (`busy`) and `resume` behave the same on B;
a killed owner's turn is closed by another instance; a stalled owner cannot write after
another one took over. The bus is PostgreSQL's LISTEN/NOTIFY, or Redis where configured."""

from __future__ import annotations

import asyncio
import json
import signal
import time
import uuid

import pytest

from tests import pace, pg
from tests.fakes.anthropic_fake import Reply
from tests.instances import POOL_SIZE, instances, instances_any_bus, moto, s3_env, stored_conversation  # noqa: F401  (fixtures)
from tests.support import ServerProcess, connect, recv, send, text_of, until


async def _frames_until_done(ws) -> list[dict]:
    return await until(ws, "done", timeout=30)


async def test_a_turn_on_a_streams_live_to_b_which_can_abort_it(instances_any_bus, fake_anthropic):
    a, b = instances_any_bus(2)
    cid = stored_conversation(a)
    ws_a, session = await connect(a, cid)
    ws_b, session_b = await connect(b, cid)
    assert session_b["type"] == "session", (session_b, b.log())
    assert session_b["running"] is False and session_b.get("seq") == session.get("seq")

    fake_anthropic.enqueue(Reply("tick " * 400, chunk_size=5, delay=0.02))  # ~8 s of streaming
    await send(ws_a, type="message", content="count slowly")
    first_a = await recv(ws_a)
    first_b = await recv(ws_b)
    assert first_a["type"] == first_b["type"] == "content_chunk"
    assert first_b["seq"] == first_a["seq"]  # the same frame, committed by A, live on B

    # A third socket, on B, mid-turn: its session says the turn runs and holds what streamed.
    ws_late, late = await connect(b, cid)
    assert late["running"] is True
    assert late["messages"][-1]["role"] == "assistant" and late["messages"][-1]["status"] == "streaming"

    # A message on B while A runs: busy, decided by A.
    await send(ws_b, type="message", content="and me?")
    busy = await _next_of(ws_b, "error")
    assert busy["code"] == "busy"

    started = time.monotonic()
    await send(ws_b, type="abort")
    done_b = (await _frames_until_done(ws_b))[-1]
    took = time.monotonic() - started
    assert done_b["stopReason"] == "aborted"
    assert took < pace.scaled(1.0), f"abort sent on B ended A's turn after {took:.2f} s"
    frames_a = await _frames_until_done(ws_a)
    assert frames_a[-1]["seq"] == done_b["seq"]

    # The late socket saw the rest without a gap or a repeat: its reply equals A's.
    late_frames = await _frames_until_done(ws_late)
    assert late_frames[0]["seq"] == late["seq"] + 1
    late_text = late["messages"][-1]["parts"][0]["text"] if late["messages"][-1]["parts"] else ""
    a_text = first_a["content"] + text_of(frames_a)
    assert late_text + text_of(late_frames) == a_text
    for ws in (ws_a, ws_b, ws_late):
        await ws.close()

    # What is stored is what was streamed, and no turn is left running.
    rows = pg.query(instances_any_bus.url, "SELECT status FROM turns WHERE conversation_id = $1", (cid,))
    assert rows == [("aborted",)]


async def _next_of(ws, kind: str) -> dict:
    while True:
        frame = await recv(ws, timeout=15)
        if frame["type"] == kind:
            return frame


async def test_resume_on_another_instance_has_no_gap(instances, fake_anthropic):
    a, b = instances(2)
    ws_a, session = await connect(a)
    cid = session["conversationId"]
    fake_anthropic.enqueue(Reply("one two three four five six seven " * 20, chunk_size=7, delay=0.01))
    await send(ws_a, type="message", content="go")
    frames = await _frames_until_done(ws_a)
    await ws_a.close()
    middle = frames[len(frames) // 2]["seq"]
    ws_b, _ = await connect(b, cid)
    await send(ws_b, type="resume", afterSeq=middle)
    replayed = await _frames_until_done(ws_b)
    assert [f["seq"] for f in replayed] == [f["seq"] for f in frames if f["seq"] > middle]
    await ws_b.close()


async def test_the_next_message_may_land_anywhere(instances_any_bus, fake_anthropic):
    """Round robin over three instances: every seq once, every reply stored as streamed."""
    servers = instances_any_bus(3)
    cid = stored_conversation(servers[0])
    seen: list[int] = []
    for n in range(6):
        fake_anthropic.enqueue(Reply(f"answer {n}", chunk_size=3))
        ws, _ = await connect(servers[n % 3], cid)
        await send(ws, type="message", content=f"question {n}")
        frames = await _frames_until_done(ws)
        assert text_of(frames) == f"answer {n}" and frames[-1]["stopReason"] == "end_turn"
        seen += [f["seq"] for f in frames if "seq" in f]
        await ws.close()
    events = pg.query(instances_any_bus.url, "SELECT seq FROM events WHERE conversation_id = $1 ORDER BY seq", (cid,))
    stored = [seq for (seq,) in events]
    assert stored == list(range(stored[0], stored[-1] + 1))  # no seq twice, none missing
    assert set(seen) <= set(stored)
    assert pg.query(instances_any_bus.url, "SELECT count(*) FROM turns WHERE status = 'running'") == [(0,)]
    ws, last = await connect(servers[1], cid)
    replies = [m["content"] for m in last["messages"] if m["role"] == "assistant"]
    assert replies == [f"answer {n}" for n in range(6)]
    await ws.close()


async def test_a_killed_owner_s_turn_is_closed_by_another_instance(instances, fake_anthropic):
    a, b = instances(2, CHAT_AGENT_CONTINUE_TURNS="0")
    cid = stored_conversation(a)
    ws_a, session = await connect(a, cid)
    ws_b, _ = await connect(b, cid)
    fake_anthropic.enqueue(Reply("never ends " * 2000, chunk_size=5, delay=0.02))
    await send(ws_a, type="message", content="talk")
    await recv(ws_b)  # it streams
    a.stop(signal.SIGKILL)
    killed = time.monotonic()
    frames = await until(ws_b, "done", timeout=30)
    took = time.monotonic() - killed
    assert took < pace.scaled(15), f"the dead owner's turn was closed after {took:.1f} s"
    errors = [f for f in frames if f["type"] == "error"]
    assert errors and "stopped" in errors[-1]["message"]
    assert frames[-1]["type"] == "done"
    await ws_b.close()
    assert pg.query(instances.url, "SELECT status FROM turns WHERE conversation_id = $1", (cid,)) == [("interrupted",)]
    # The next turn, on any instance, is valid.
    fake_anthropic.enqueue(Reply("back again"))
    ws, again = await connect(b, cid)
    assert again["running"] is False
    await send(ws, type="message", content="still there?")
    assert text_of(await _frames_until_done(ws)) == "back again"
    await ws.close()


async def test_a_stalled_owner_cannot_write_after_another_took_over(instances, fake_anthropic):
    a, b = instances(2, CHAT_AGENT_LEASE_SECONDS="2")
    cid = stored_conversation(a)
    ws_a, session = await connect(a, cid)
    ws_b, _ = await connect(b, cid)
    fake_anthropic.enqueue(Reply("paused " * 1000, chunk_size=5, delay=0.02))
    await send(ws_a, type="message", content="talk")
    await recv(ws_b)
    a.proc.send_signal(signal.SIGSTOP)
    try:
        frames = await until(ws_b, "done", timeout=20)  # B closed it as interrupted
        assert frames[-1]["type"] == "done"
        closed_at = pg.query(instances.url, "SELECT max(seq) FROM events WHERE conversation_id = $1", (cid,))[0][0]
    finally:
        a.proc.send_signal(signal.SIGCONT)
    await asyncio.sleep(3)  # A wakes up, streams on, and tries to write what it holds
    after = pg.query(instances.url, "SELECT max(seq), count(*) FROM events WHERE conversation_id = $1", (cid,))[0]
    assert after[0] == closed_at, "the stale owner wrote after another instance took over"
    rows = pg.query(instances.url, "SELECT seq FROM events WHERE conversation_id = $1 ORDER BY seq", (cid,))
    assert [s for (s,) in rows] == list(range(rows[0][0], rows[-1][0] + 1))
    await ws_a.close()
    await ws_b.close()


async def test_an_upload_on_one_instance_is_read_on_another(instances):
    a, b = instances(2)
    for server in (a, b):
        status, health = server.get("/health")
        assert health["storage"] == "postgresql" and health["files"]["storage"] == "s3"
        assert health["instance"]["bus"] in ("postgresql", "redis") and health["instance"]["jobs"] == "postgresql"
    assert a.get("/health")[1]["instance"]["id"] != b.get("/health")[1]["instance"]["id"]
    status, body = _upload(a, b"hello from instance A\n", "note.txt")
    assert status in (200, 201), body
    import urllib.request

    with urllib.request.urlopen(f"{b.http_url}/api/uploads/{body['uploadId']}", timeout=10) as response:
        assert response.read() == b"hello from instance A\n"


def _upload(server, data: bytes, filename: str) -> tuple[int, dict]:
    import urllib.request

    boundary = uuid.uuid4().hex
    payload = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{filename}\"\r\n"
               f"Content-Type: text/plain\r\n\r\n").encode() + data + f"\r\n--{boundary}--\r\n".encode()
    request = urllib.request.Request(server.http_url + "/api/uploads", data=payload, method="POST",
                                     headers={"Content-Type": f"multipart/form-data; boundary={boundary}"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_a_second_instance_with_local_files_refuses_to_start(make_server, tmp_path, pg_url):
    make_server(tmp_path / "one", CHAT_AGENT_DATABASE_URL=pg_url)
    with pytest.raises(RuntimeError) as failed:
        make_server(tmp_path / "two", CHAT_AGENT_DATABASE_URL=pg_url)
    assert "CHAT_AGENT_S3_BUCKET" in str(failed.value) and "other instance" in str(failed.value)


async def _turn(server, cid: str, content: str) -> tuple[dict, list[dict]]:
    """One message on `server`: its session and every frame up to `done` (titles included)."""
    ws, session = await connect(server, cid)
    try:
        await send(ws, type="message", content=content)
        frames = []
        while not frames or frames[-1]["type"] != "done":
            frames.append(json.loads(await asyncio.wait_for(ws.recv(), 30)))
        return session, frames
    finally:
        await ws.close()


def _connections(application_name: str) -> int:
    return pg.query(pg.server_url(), "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1",
                    (application_name,))[0][0]


async def test_twenty_conversations_round_robin_over_three_instances(instances, fake_anthropic):
    servers = instances(3)
    cids = []
    for n in range(20):
        cids.append(stored_conversation(servers[n % 3]))
    fake_anthropic.responder = lambda request: Reply("reply to " + _last_user_text(request), chunk_size=4)
    seen: dict[str, list[tuple[dict, list[dict]]]] = {cid: [] for cid in cids}
    peak = 0

    async def count_connections() -> None:
        nonlocal peak
        while True:
            peak = max(peak, await asyncio.to_thread(_connections, instances.application_name))
            await asyncio.sleep(0.05)

    counting = asyncio.create_task(count_connections())
    try:
        for round_ in range(3):
            results = await asyncio.gather(*(_turn(servers[(n + round_) % 3], cid, f"q{round_} of {cid[:6]}")
                                             for n, cid in enumerate(cids)))
            for cid, result in zip(cids, results):
                seen[cid].append(result)
    finally:
        fake_anthropic.responder = None
        counting.cancel()
    # CHAT_AGENT_DATABASE_POOL_SIZE bounds each instance: the store's pool, the job queue's and
    # the knowledge bases' (at most that many each; no quotas here), and four connections of
    # their own: the job queue's LISTEN, the bus's LISTEN and its two senders.
    assert 0 < peak <= 3 * (3 * POOL_SIZE + 4), peak
    for cid in cids:
        last_done = 0
        for session, frames in seen[cid]:
            seqs = [f["seq"] for f in frames]
            assert session.get("seq", 0) >= last_done
            assert seqs == list(range(session.get("seq", 0) + 1, session.get("seq", 0) + 1 + len(seqs))), seqs
            assert frames[-1]["stopReason"] == "end_turn"
            last_done = seqs[-1]
        events = [s for (s,) in pg.query(instances.url, "SELECT seq FROM events WHERE conversation_id = $1 ORDER BY seq",
                                         (cid,))]
        assert events == list(range(events[0], events[-1] + 1))
        streamed = [text_of(frames) for _, frames in seen[cid]]
        assert streamed == [f"reply to q{r} of {cid[:6]}" for r in range(3)]
        ws, last = await connect(servers[0], cid)
        assert [m["content"] for m in last["messages"] if m["role"] == "assistant"] == streamed
        await ws.close()
    assert pg.query(instances.url, "SELECT count(*) FROM turns WHERE status = 'running'") == [(0,)]


def _streaming_text(session: dict) -> str:
    running = [m for m in session.get("messages", []) if m["status"] == "streaming"]
    return "".join(p.get("text", "") for m in running for p in m["parts"] if p["type"] == "text")


def _last_user_text(request) -> str:
    content = request["messages"][-1]["content"]
    return content if isinstance(content, str) else next(b["text"] for b in content if b.get("type") == "text")


async def test_a_rolling_restart_changes_nothing_for_turns_running_elsewhere(instances, fake_anthropic):
    a, b, c, d = instances(4)  # D, the new instance, is started first: a start on a busy machine
    # may take longer than the turns, which must still run when C stops and its clients move.
    words = "steady " * int(600 * min(pace.factor(), 3))  # ~14 s of streaming on a quiet machine
    fake_anthropic.enqueue(Reply(words, chunk_size=6, delay=0.02), Reply(words, chunk_size=6, delay=0.02))
    sockets = []
    for server in (a, b):
        ws, session = await connect(server)
        await send(ws, type="message", content="stream please")
        sockets.append((ws, session["conversationId"]))
    watchers = [await connect(c, cid) for _, cid in sockets]  # clients on the instance that restarts
    await recv(sockets[0][0])
    assert c.stop(signal.SIGTERM) in (0, -signal.SIGTERM)  # an old instance stops, mid-turn
    # The sockets on C went away with it; their clients reconnect to D: the session there
    # holds the reply so far, and the frames after it finish it, without a gap.
    moved = []
    for (watcher, first), (_, cid) in zip(watchers, sockets):
        frames = [first]
        try:
            while True:
                frames.append(json.loads(await asyncio.wait_for(watcher.recv(), 10)))
        except Exception:
            pass
        assert frames[-1]["type"] != "done", "the turn ended before the restart: nothing was tested"
        ws, again = await connect(d, cid)
        assert again["running"] is True and again["seq"] >= frames[-1].get("seq", 0)
        moved.append((ws, again))
    # Every socket read at once: one left unread behind a long stream stops taking the
    # library's keepalive pongs and is closed for it.
    read = await asyncio.gather(*(_frames_until_done(ws) for ws, _ in [*moved, *sockets]))
    rests, originals = read[:len(moved)], read[len(moved):]
    for (ws, again), rest in zip(moved, rests):
        assert rest[0]["seq"] == again["seq"] + 1 and rest[-1]["stopReason"] == "end_turn"
        assert _streaming_text(again) + text_of(rest) == words
        await ws.close()
    for frames in originals:
        assert frames[-1]["stopReason"] == "end_turn"
    for ws, cid in sockets:
        await ws.close()
        assert pg.query(instances.url, "SELECT status FROM turns WHERE conversation_id = $1", (cid,)) == [("complete",)]

"""Background work and memories with three real server processes on one PostgreSQL schema: a
title and the debounced reflection are asked of the model once per due event, whichever
instances ran the turns, and two instances changing one user's memories at once lose
neither change, nor serve memories another instance has replaced. Counted at the fake
Anthropic API, which records every request."""

from __future__ import annotations

import asyncio
import json
import time
import uuid

from tests import pg
from tests.conftest import SMALL_MODEL
from tests.fakes.anthropic_fake import Reply, ToolUse
from tests.instances import instances, instances_any_bus, moto, s3_env  # noqa: F401  (fixtures)
from tests.support import connect, recv, send, until

TITLE_DELAY = 3.0  # seconds the fake takes to name a conversation: long enough for a turn elsewhere
REFLECTION_DELAY = 4.0  # CHAT_AGENT_REFLECTION_DELAY: longer than a turn on a loaded machine


def asked(fake, tool: str, marker: str) -> int:
    """How many requests forced `tool` about the conversation holding `marker`."""
    return sum(1 for r in list(fake.requests) if (r.body.get("tool_choice") or {}).get("name") == tool
               and marker in json.dumps(r.body))


def small_model(body: dict):
    """The fake's answers to the background calls; None: its default (the main model's turns
    follow the directives in their messages)."""
    if body.get("model") != SMALL_MODEL:
        return None
    forced = (body.get("tool_choice") or {}).get("name")
    if forced == "set_title":
        return Reply([ToolUse("set_title", {"title": "Notes on Owls"})], delay=TITLE_DELAY / 8)
    if forced == "store_reflections":
        return Reply([ToolUse("store_reflections", {"styleRules": ["Keep it short."],
                                                    "content": ["Writes about owls."]})])
    return None


async def turn(server, cid: str | None, content: str) -> tuple[str, list[dict]]:
    """One message on `server`, its socket closed once the turn is done (so that the instance
    lets the conversation go: the next turn may run on any instance)."""
    ws, session = await connect(server, cid)
    try:
        await send(ws, type="message", content=content)
        return session["conversationId"], await until(ws, "done", timeout=30)
    finally:
        await ws.close()


async def eventually(condition, timeout: float = 30.0) -> None:
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.1)


def artifact(text: str) -> str:
    """A message whose answer writes the artifact (the fake follows the directive)."""
    return "[[tool generate_artifact " + json.dumps({"title": "Owls", "type": "text", "content": text}) + "]]"


async def test_a_title_is_asked_for_once_however_many_instances_end_turns(instances_any_bus, fake_anthropic):
    """The title job is handed to the conversation's owner over the bus: on both buses."""
    a, b, c = instances_any_bus(3)
    fake_anthropic.responder = small_model
    try:
        marker = f"owls-{uuid.uuid4().hex[:8]}"
        cid, frames = await turn(a, None, f"{marker}: where do owls sleep?")
        assert frames[-1]["stopReason"] == "end_turn"
        # While the title is being asked for (slowly), the next turn runs on B and ends
        # untitled too; then one on C.
        await turn(b, cid, "and in winter?")
        await turn(c, cid, "thanks")

        def titled() -> bool:
            return a.get(f"/api/conversations/{cid}")[1].get("title") == "Notes on Owls"

        await eventually(titled)
        await asyncio.sleep(TITLE_DELAY + 2)  # room for a second request, were one made
        assert asked(fake_anthropic, "set_title", marker) == 1
        # Published once, by the owner: one `title` frame, the conversation's seqs unbroken.
        rows = pg.query(instances_any_bus.url, "SELECT seq, type FROM events WHERE conversation_id = $1"
                                               " ORDER BY seq", (cid,))
        assert [t for _, t in rows].count("title") == 1
        assert [s for s, _ in rows] == list(range(rows[0][0], rows[-1][0] + 1))
        assert all(server.get(f"/api/conversations/{cid}")[1]["title"] == "Notes on Owls" for server in (b, c))

        # Another conversation's first exchange is another due event: one more request.
        other = f"bats-{uuid.uuid4().hex[:8]}"
        cid2, _ = await turn(c, None, f"{other}: do bats sleep upside down?")
        await eventually(lambda: b.get(f"/api/conversations/{cid2}")[1].get("title") == "Notes on Owls")
        await asyncio.sleep(1)
        assert asked(fake_anthropic, "set_title", other) == 1
    finally:
        fake_anthropic.responder = None


async def test_a_reflection_runs_once_after_turns_on_three_instances(instances, fake_anthropic):
    servers = instances(3, CHAT_AGENT_REFLECTION_DELAY=str(REFLECTION_DELAY))
    fake_anthropic.responder = small_model
    try:
        marker = f"owls-{uuid.uuid4().hex[:8]}"
        cid = None
        for n, server in enumerate(servers):  # each turn changes the artifact: each restarts the wait
            cid, frames = await turn(server, cid, f"{marker} draft {n} {artifact(f'Owls, draft {n}.')}")
            assert frames[-1]["stopReason"] == "end_turn"
        last_turn = time.monotonic()
        await asyncio.sleep(REFLECTION_DELAY / 2)
        assert asked(fake_anthropic, "store_reflections", marker) == 0, "the wait was not restarted"
        await eventually(lambda: asked(fake_anthropic, "store_reflections", marker) == 1)
        assert time.monotonic() - last_turn >= REFLECTION_DELAY
        await asyncio.sleep(REFLECTION_DELAY + 2)  # an instance that scheduled its own would have asked by now
        assert asked(fake_anthropic, "store_reflections", marker) == 1
        await eventually(lambda: servers[2].get("/api/memories")[1] == {"styleRules": ["Keep it short."],
                                                                        "content": ["Writes about owls."]})

        # A later change of the artifact is a new due event: one more reflection, once.
        await turn(servers[1], cid, f"{marker} again {artifact('Owls, final.')}")
        await eventually(lambda: asked(fake_anthropic, "store_reflections", marker) == 2)
        await asyncio.sleep(REFLECTION_DELAY + 2)
        assert asked(fake_anthropic, "store_reflections", marker) == 2
        # No job is left waiting or running, and none failed: finished ones are deleted.
        assert pg.query(instances.url, "SELECT count(*) FROM procrastinate_jobs") == [(0,)]
    finally:
        fake_anthropic.responder = None


def reflect(*facts: str) -> str:
    """A message whose answer records facts with the `reflect` tool, after a second's pause
    (so that two turns started together have both read the memories before either writes)."""
    return "[[slow 1]] [[tool reflect " + json.dumps({"facts": list(facts)}) + "]]"


async def test_memories_changed_on_two_instances_at_once_keep_both(instances, fake_anthropic):
    a, b, c = instances(3)
    await asyncio.gather(turn(a, None, reflect("Keeps bees.")), turn(b, None, reflect("Plays the oboe.")))
    for server in (a, b, c):
        memories = server.get("/api/memories")[1]
        assert sorted(memories["content"]) == ["Keeps bees.", "Plays the oboe."], memories

    # What another instance replaced is what every instance serves, and what the next turn
    # anywhere is told.
    assert b.request("PUT", "/api/memories", None, {"styleRules": ["Use British spelling."],
                                                    "content": ["Keeps bees."]})[0] == 200
    assert a.get("/api/memories")[1] == {"styleRules": ["Use British spelling."], "content": ["Keeps bees."]}
    await turn(a, None, "hello")
    system = json.dumps(fake_anthropic.main_bodies[-1]["system"])
    assert "Use British spelling." in system and "Plays the oboe." not in system


async def test_a_slow_title_does_not_cut_the_next_turn_of_a_client_that_came_back(make_server, fake_anthropic):
    """The client leaves right after its first turn, while the title's model call is slow,
    and comes back with a message: the title job still holds the conversation, so the new
    turn runs on the same one and ends, and every seq is handed out once."""
    server = make_server()
    fake_anthropic.enqueue(Reply([ToolUse("set_title", {"title": "Slow Title"})], delay=0.5),
                           when=lambda body: body.get("model") == SMALL_MODEL and "set_title" in json.dumps(body))
    ws, session = await connect(server)
    fake_anthropic.enqueue(Reply("first"))
    await send(ws, type="message", content="one")
    first = await until(ws, "done")
    await ws.close()  # nothing listens now, and the title is still being written
    await asyncio.sleep(0.2)
    ws, again = await connect(server, session["conversationId"])
    fake_anthropic.enqueue(Reply("second " * 30, chunk_size=8, delay=0.05))
    await send(ws, type="message", content="two")
    frames: list[dict] = []
    titled = again["title"] is not None  # (the title may have come while the client was away)
    while not ({"done"} | ({"title"} if not titled else set())) <= {f["type"] for f in frames}:
        frames.append(await recv(ws, timeout=20, skip=()))
    assert [f for f in frames if f["type"] == "done"][0]["stopReason"] == "end_turn"
    titles = [f["title"] for f in frames if f["type"] == "title"] or [again["title"]]
    assert titles == ["Slow Title"]
    assert again["seq"] >= first[-1]["seq"]
    seqs = [f["seq"] for f in frames]
    assert seqs == list(range(again["seq"] + 1, again["seq"] + 1 + len(seqs))), "every seq once, in order"
    await ws.close()

"""A rolling restart under load (issue 22): 30 conversations stream long replies on 3
instances on one PostgreSQL; each instance in turn gets SIGTERM and is started again. A
stopping instance hands its running turns over instead of aborting them: another instance
(or the same one, back) continues each from its last completed step. Every turn ends
`end_turn`, none `aborted` or `interrupted`, and what every client saw is what the store holds
(`checker`)."""

from __future__ import annotations

import asyncio
import signal
import time

import pytest

from tests import pg
from tests.chaos.checker import any_server, check, stored_pg
from tests.chaos.fleet import Fleet, answering
from tests.instances import instances, moto, s3_env  # noqa: F401  (fixtures)

CONVERSATIONS = 30
LEASE = "3"  # seconds: a handed-over turn is continued once its lease has run out


@pytest.mark.timeout(420)
async def test_a_rolling_restart_aborts_no_turn(instances, launch, fake_anthropic):
    servers = launch(3, **instances.env, CHAT_AGENT_LEASE_SECONDS=LEASE)
    fleet = Fleet(servers)
    with answering(fake_anthropic, delay=0.1):  # 30 s replies: each outlives one instance's stop
        try:
            await fleet.open(CONVERSATIONS)
            stops = []
            for server in servers:
                began = time.monotonic()
                # (In threads: the clients' sockets are read on this loop meanwhile.)
                await asyncio.to_thread(server.stop, signal.SIGTERM)
                stops.append(time.monotonic() - began)
                await asyncio.to_thread(server.start)
            ended = await _all_ended(instances.url, fleet.conversations, timeout=180)
            await fleet.quiet()
            stored = stored_pg(instances.url, any_server(servers), fleet.conversations)
            report = check(fleet.socks, stored)
            print(f"\nrolling restart ({CONVERSATIONS} conversations, 3 instances; stops took "
                  f"{', '.join(f'{s:.1f}' for s in stops)} s; all turns over {ended:.1f} s after the last):\n"
                  f"{report.summary()}")
        finally:
            await fleet.close()
    assert report.clean, report.summary()
    outcomes = sorted({(status, stop) for _, cid, _, status, stop in stored.turns if cid in fleet.conversations})
    assert outcomes == [("complete", "end_turn")], f"turns ended otherwise: {outcomes}"
    assert len(stored.turns) >= CONVERSATIONS


async def _all_ended(url: str, conversations: list[str], timeout: float) -> float:
    """Waits until the store holds no running turn of these conversations; how long it took."""
    began = time.monotonic()
    while time.monotonic() - began < timeout:
        rows = pg.query(url, "SELECT conversation_id FROM turns WHERE status = 'running'")
        if not {row[0] for row in rows} & set(conversations):
            return time.monotonic() - began
        await asyncio.sleep(0.5)
    raise AssertionError(f"turns still running {timeout:.0f} s after the rolling restart")

"""The disk under SQLite fills up mid-turn while 10 conversations stream on one instance, and
is freed 20 s later (issue 21, DESIGN "A turn's life"): turns go on (or end) cleanly, what
every client saw is what the store holds afterwards, and every conversation takes a new turn
within 15 s of the space's return. Nothing is restarted.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.chaos.checker import check, stored_sqlite
from tests.chaos.disk import fill, tiny_disk
from tests.chaos.fleet import Fleet, answering, Outage, ride_out, timeline

CONVERSATIONS = 10
FULL_FOR = 20.0
USABLE_WITHIN = 15.0  # seconds after space returns (issue 21 "Done when")


@pytest.fixture
def disk(tmp_path):
    with tiny_disk(tmp_path / "disk", "24m") as disk:
        yield disk
        log = disk / "data" / "server.log"  # kept: the disk goes with its mount
        if log.exists():
            (tmp_path / "server.log").write_bytes(log.read_bytes())


@pytest.mark.timeout(240)
async def test_a_full_disk_under_ten_streaming_conversations(disk, launch, fake_anthropic):
    [server] = launch(1, disk / "data")
    fleet = Fleet([server])
    with answering(fake_anthropic, delay=0.05):
        try:
            await fleet.open(CONVERSATIONS)
            await asyncio.sleep(2)
            filler = fill(disk)
            outage = Outage(time.monotonic() + FULL_FOR)
            try:
                people = [asyncio.create_task(ride_out(talk, n % 2 == 0, outage, USABLE_WITHIN))
                          for n, talk in enumerate(fleet.talks)]
                await asyncio.sleep(FULL_FOR)
            finally:
                filler.unlink()
            outage.over()
            taken = await asyncio.gather(*people)
            await fleet.quiet()
            stored = stored_sqlite(disk / "data" / "chat-agent.db", server, fleet.conversations)
            report = check(fleet.socks, stored, fleet.talks, [server])
            report.recovery = [r for r in taken if r is not None]
            never = sum(r is None for r in taken)
            print(f"\nDisk full for {FULL_FOR:.0f} s ({CONVERSATIONS} conversations, SQLite):\n{report.summary()}")
            print(timeline(fleet.talks, outage.back_at))
        finally:
            await fleet.close()
    assert report.clean, report.summary()
    assert never == 0, f"{never} conversations took no new turn within {USABLE_WITHIN} s of the space's return"
    assert max(report.recovery) <= USABLE_WITHIN, report.recovery

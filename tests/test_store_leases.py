"""Conversation leases and fenced writes, on a SQLite file shared by processes and on PostgreSQL:
claim, renew, release, expiry and takeover (the epoch is the fencing token), and `apply`
refusing a whole batch whose lease changed hands."""

from __future__ import annotations

import asyncio
import json
import sys
import textwrap
import time
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from chat_agent.store import (AppendEvents, CreateConversation, EventRecord, FencedOut, Lease, SetTitle, Store,
                              StoreError)
from tests import pace, reaper
from tests.stores import Backend
from tests.support import ROOT

OWNER = "u"
TTL = 30.0


@pytest_asyncio.fixture
async def store(backend: Backend) -> AsyncIterator[Store]:
    async with backend.new() as opened:
        yield opened


def expire(backend: Backend, cid: str) -> None:
    """The holder stopped renewing long ago (rather than sleeping through a short ttl)."""
    backend.sql("UPDATE leases SET expires_at = expires_at - 1000 WHERE conversation_id = ?", (cid,))


def events(cid: str, *seqs: int) -> AppendEvents:
    return AppendEvents(OWNER, cid, tuple(EventRecord(cid, s, "pong", None, "{}") for s in seqs), 5.0)


async def test_claim_keeps_for_its_holder_and_refuses_others(store: Store, backend: Backend) -> None:
    assert await store.get_lease("c1") is None
    before = time.time()
    lease = await store.claim_lease("c1", "a", TTL)
    assert lease is not None and (lease.conversation_id, lease.instance, lease.epoch) == ("c1", "a", 1)
    assert before + TTL - 5 < lease.expires_at < time.time() + TTL + 5  # the database's clock is this machine's
    assert await store.claim_lease("c1", "b", TTL) is None  # held, unexpired
    again = await store.claim_lease("c1", "a", TTL)  # its holder claims it again: same tenure, later expiry
    assert again is not None and again.epoch == 1 and again.expires_at >= lease.expires_at
    assert await store.get_lease("c1") == again
    with pytest.raises(ValueError):
        await store.claim_lease("c2", "", TTL)  # the empty name marks a free lease


async def test_expiry_lets_another_take_over_with_the_next_epoch(store: Store, backend: Backend) -> None:
    await store.claim_lease("c1", "a", TTL)
    expire(backend, "c1")
    held = await store.get_lease("c1")
    assert held is not None and held.instance == "a" and held.expires_at < time.time()  # expired, still there
    taken = await store.claim_lease("c1", "b", TTL)
    assert taken is not None and (taken.instance, taken.epoch) == ("b", 2)
    assert await store.claim_lease("c1", "a", TTL) is None  # the old holder is out
    expire(backend, "c1")
    kept = await store.claim_lease("c1", "b", TTL)  # expired, but nobody took it: still b's tenure
    assert kept is not None and kept.epoch == 2
    expire(backend, "c1")
    back = await store.claim_lease("c1", "a", TTL)
    assert back is not None and (back.instance, back.epoch) == ("a", 3)


async def test_a_real_expiry_by_the_clock(store: Store) -> None:
    await store.claim_lease("c1", "a", 0.3)
    assert await store.claim_lease("c1", "b", TTL) is None
    await asyncio.sleep(0.6)
    taken = await store.claim_lease("c1", "b", TTL)
    assert taken is not None and taken.epoch == 2


async def test_renew_extends_the_instances_leases_it_still_has_expired_or_not(store: Store, backend: Backend) -> None:
    for cid in ("c1", "c2", "c3", "c5", "c6"):
        await store.claim_lease(cid, "a", 5)
    await store.claim_lease("c4", "b", 5)
    expire(backend, "c3")  # a was cut off from the database for a while; nobody took it meanwhile
    expire(backend, "c5")
    assert await store.claim_lease("c5", "b", 5) is not None  # ...this one b took meanwhile
    renewed = await store.renew_leases("a", 100, ["c1", "c2", "c3", "c4", "c5"])  # not c6: not asked
    assert sorted(lease.conversation_id for lease in renewed) == ["c1", "c2", "c3"]
    assert all(lease.instance == "a" and lease.epoch == 1 and lease.expires_at > time.time() + 90 for lease in renewed)
    assert (await store.get_lease("c4")).expires_at < time.time() + 10  # type: ignore[union-attr]
    assert (await store.get_lease("c5")).instance == "b"  # type: ignore[union-attr]
    assert (await store.get_lease("c6")).expires_at < time.time() + 10  # type: ignore[union-attr]
    assert await store.renew_leases("nobody", 100, ["c1"]) == []


async def test_release_frees_it_for_anyone_and_the_epoch_goes_on(store: Store) -> None:
    lease = await store.claim_lease("c1", "a", TTL)
    assert lease is not None
    await store.release_lease("c1", "a", lease.epoch + 1)  # not its tenure: nothing happens
    await store.release_lease("c1", "b", lease.epoch)
    assert await store.get_lease("c1") == lease
    await store.release_lease("c1", "a", lease.epoch)
    assert await store.get_lease("c1") is None and await store.expired_leases() == []
    assert await store.renew_leases("a", TTL, ["c1"]) == []
    taken = await store.claim_lease("c1", "b", TTL)  # at once, no expiry to wait for
    assert taken is not None and (taken.instance, taken.epoch) == ("b", 2)  # never an epoch twice


async def test_expired_leases_are_listed_oldest_first(store: Store, backend: Backend) -> None:
    for cid in ("c1", "c2", "c3", "c4"):
        await store.claim_lease(cid, "a", TTL)
    expire(backend, "c3")
    expire(backend, "c1")
    expire(backend, "c1")  # the longer ago
    released = await store.claim_lease("c5", "a", TTL)
    await store.release_lease("c5", "a", released.epoch)  # type: ignore[union-attr]
    assert [lease.conversation_id for lease in await store.expired_leases()] == ["c1", "c3"]
    assert [lease.conversation_id for lease in await store.expired_leases(limit=1)] == ["c1"]
    assert all(isinstance(lease, Lease) and lease.instance == "a" for lease in await store.expired_leases())


async def test_a_stale_epoch_applies_nothing(store: Store, backend: Backend) -> None:
    await store.apply([CreateConversation(OWNER, "c1", 1.0), CreateConversation(OWNER, "c2", 1.0)])
    a1 = await store.claim_lease("c1", "a", TTL)
    a2 = await store.claim_lease("c2", "a", TTL)
    assert a1 is not None and a2 is not None
    fences = {"c1": ("a", a1.epoch), "c2": ("a", a2.epoch)}
    await store.apply([events("c1", 1), events("c2", 1)], fences)
    expire(backend, "c2")
    await store.apply([events("c2", 2)], fences)  # expired but not taken over: still its writer
    assert await store.claim_lease("c2", "b", TTL) is not None
    with pytest.raises(FencedOut) as info:
        await store.apply([events("c1", 2), SetTitle(OWNER, "c1", "x"), events("c2", 3), SetTitle(OWNER, "c2", "y")],
                          fences)
    assert info.value.conversation_ids == ("c2",) and isinstance(info.value, StoreError)
    # the whole batch rolled back, the conversation still held included
    assert [e.seq for e in await store.events_after(OWNER, "c1", 0)] == [1]
    assert [e.seq for e in await store.events_after(OWNER, "c2", 0)] == [1, 2]
    assert [(await store.get_conversation(OWNER, cid)).title for cid in ("c1", "c2")] == [None, None]  # type: ignore[union-attr]
    with pytest.raises(FencedOut) as info:  # a lease never claimed fences out too
        await store.apply([events("c1", 2)], {"c1": ("a", a1.epoch), "c9": ("a", 1)})
    assert info.value.conversation_ids == ("c9",)
    await store.apply([events("c1", 2)], {"c1": ("a", a1.epoch)})
    await store.apply([events("c2", 3)], {"c2": ("b", a2.epoch + 1)})  # the new holder writes
    assert [e.seq for e in await store.events_after(OWNER, "c2", 0)] == [1, 2, 3]


CLAIMER = textwrap.dedent("""
    import asyncio, json, sys, time
    from pathlib import Path
    from chat_agent.store import create_store

    async def main(url, instance, count, start):
        async with create_store(url, Path(".")) as store:
            await asyncio.sleep(max(0.0, start - time.time()))
            won = [cid for n in range(count) if await store.claim_lease(cid := f"k{n}", instance, 30)]
        print(json.dumps(won))

    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])))
""")


async def test_two_processes_claiming_at_once_exactly_one_wins_each(store: Store, backend: Backend) -> None:
    count, start = 60, time.time() + pace.scaled(3)  # both are started and connected by then
    children = [await reaper.spawn_async(
        sys.executable, "-c", CLAIMER, backend.url, name, str(count), str(start), cwd=ROOT,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE) for name in ("p1", "p2")]
    outputs = [await asyncio.wait_for(child.communicate(), timeout=60) for child in children]
    for child, (_, err) in zip(children, outputs):
        assert child.returncode == 0, err.decode()
    won = [set(json.loads(out)) for out, _ in outputs]
    assert won[0].isdisjoint(won[1]) and won[0] | won[1] == {f"k{n}" for n in range(count)}
    for n in range(count):
        lease = await store.get_lease(f"k{n}")
        assert lease is not None and lease.epoch == 1 and f"k{n}" in won[("p1", "p2").index(lease.instance)]


async def test_concurrent_claims_on_separate_connections(backend: Backend) -> None:
    """Many claimers at once, each on its own store, for the same expired lease: one wins."""
    stores = [backend.new() for _ in range(4)]
    for opened in stores:
        await opened.open()
    try:
        for round in range(10):
            cid = f"r{round}"
            await stores[0].claim_lease(cid, "old", TTL)
            expire(backend, cid)
            results = await asyncio.gather(*(s.claim_lease(cid, f"i{n}", TTL) for n, s in enumerate(stores)))
            winners = [lease for lease in results if lease is not None]
            assert len(winners) == 1 and winners[0].epoch == 2, results
    finally:
        for opened in stores:
            await opened.close()

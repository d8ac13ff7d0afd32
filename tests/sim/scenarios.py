"""Fault schedules written out by hand: each one found a bug of the sessions layer before it
was fixed, and stays in CI (tests/test_sim.py) with a few seeds for the clients' choices.

    python -m tests.sim --scenario lease-lost --seeds 0:40
"""

from __future__ import annotations

from tests.sim.bus import BusFault
from tests.sim.run import Plan
from tests.sim.store import StoreFault


def _takeover() -> Plan:
    # The owner stalls past its lease twice: another instance takes the turn over (once: it
    # was closed twice, two `done`, when the conversation was not open there).
    return Plan(nodes=3, slots=[1], faults_end=40.0, stalls=[(8.0, 20.0), (20.0, 15.0)])


def _lease_lost() -> Plan:
    # The owner stalls, another takes over and writes on, the first comes back and learns it
    # lost the lease: its sockets must get what the new owner wrote (they missed it).
    return Plan(nodes=2, slots=[2, 1], faults_end=40.0, stalls=[(6.0, 16.0), (22.0, 16.0)])


def _in_doubt() -> Plan:
    # Commits whose answer is lost after they went in: retried, they break a constraint, and
    # the conversation is reloaded; its sockets must still get every frame the store holds.
    return Plan(nodes=1, slots=[2, 1], faults_end=40.0, store_faults=[StoreFault("indoubt", 5.0, 35.0)])


def _cut() -> Plan:
    # The database's network path breaks for 30 s (longer than a lease): the commit under way
    # goes in unacknowledged, nothing else gets through (held, then refused) until the path is
    # back, and then each instance's first write meets a connection the cut broke.
    return Plan(nodes=2, slots=[2, 2], faults_end=50.0,
                store_faults=[StoreFault("cut", 6.0, 30.0), StoreFault("refuse", 30.0, 36.0),
                              StoreFault("stale", 36.0, 38.0)])


def _take_back() -> Plan:
    # The only instance stalls past its lease, which a steal takes meanwhile and lets expire:
    # back, it learns it lost the lease while the lease is free again. It took the
    # conversation back and continued its turn while still handing it over, then followed a
    # turn it ran itself (the conversation stayed "running" for good).
    return Plan(nodes=1, slots=[1, 1, 2], faults_end=48.0, store_faults=[StoreFault("slow", 20.4, 31.3)],
                stalls=[(20.5, 23.6), (14.3, 3.2)], steals=[20.7], model_faults=True)


def _hand_over() -> Plan:
    # A commit in doubt while the lease is stolen: the owner showed its sockets frames it could
    # not store, and the new owner's frames reached them over the bus before they were closed
    # (a history told two ways).
    return Plan(nodes=2, slots=[1, 2], faults_end=25.0, store_faults=[StoreFault("indoubt", 11.7, 12.6)],
                bus_faults=[BusFault("delay", 8.0, 20.5, "n0")], steals=[12.4, 19.3, 23.7])


def _opened_twice() -> Plan:
    # The owner dies mid-turn while the store is in doubt: a socket on the other instance
    # waited on the store to open the conversation, gave up and opened it again, and both
    # openings ended as the store came back. One copy continued the turn, the other (opened
    # after it, forgetting it) closed it: two `done` (seed 1274). A command held by a copy let
    # go meanwhile published its refusal there, at a seq the copy in use took too (1096), or
    # took the conversation and closed its cut turn in that copy, which closed nothing (seed
    # 373 of the random schedules). A socket opened as the turn was taken up got a `session`
    # without the reply so far (1344).
    return Plan(nodes=2, slots=[1, 2, 1], faults_end=42.6, kills=[24.37],
                store_faults=[StoreFault("indoubt", 3.91, 16.54), StoreFault("indoubt", 24.53, 42.57)])


SCENARIOS = {"takeover": _takeover, "lease-lost": _lease_lost, "in-doubt": _in_doubt, "cut": _cut,
             "take-back": _take_back, "hand-over": _hand_over,
             "opened-twice": _opened_twice}

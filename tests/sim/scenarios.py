"""Fault schedules written out by hand: each one found a bug of the sessions layer before it
was fixed, and stays in CI (tests/test_sim.py) with a few seeds for the clients' choices.

    python -m tests.sim --scenario lease-lost --seeds 0:40
"""

from __future__ import annotations

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


SCENARIOS = {"takeover": _takeover, "lease-lost": _lease_lost, "in-doubt": _in_doubt, "cut": _cut}

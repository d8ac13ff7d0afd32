"""A deterministic simulation of the sessions layer (issue 21, DESIGN "A turn's life").

The real sessions code (hub, turns, recovery, ownership, the store writer, the agent loop,
the WebSocket endpoint) runs in-process on virtual time, over a store, a bus, a model and
clients that a seeded schedule fails; a checker asserts the invariants of a turn's life.
A run is a function of its seed:

    python -m tests.sim --seeds 0:2000        # failures, summed up
    python -m tests.sim --seed 17 --verbose   # one run again, with its trace
    python -m tests.sim --seeds 0:200 --bug send-before-store

See run.py (a run's phases), world.py (virtual time), checker.py (the invariants).
"""

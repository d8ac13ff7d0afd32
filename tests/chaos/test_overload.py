"""Overload alone never expires an instance's own leases (issue 21, DESIGN "A turn's life"):
200 sessions stream on one SQLite instance that shares its one core with 2 stress-ng workers,
with a 2 s lease (renewed every 0.67 s) so that a renewal held up behind bulk work shows at
this scale. (The server and stress-ng are pinned to the last core: the rest of the suite keeps
the others.) The 1,000-session figure is bench/overload_leases.py's.

While they stream, the test reads the leases table beside the server (read-only, as an
operator would): no lease the instance holds may pass its expiry. And every turn ends
`end_turn`, stored `complete`; the server never says it lost a lease.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from tests.chaos.recorder import Sock
from tests.conftest import server_env
from tests.fakes.anthropic_fake import Reply
from tests.support import ServerProcess

SESSIONS = 200
LEASE = 2.0


def headroom(db) -> float | None:
    """The least time left on a lease the instance holds (s); negative: one expired."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as conn:
        row = conn.execute("SELECT min(expires_at) FROM leases WHERE instance <> ''").fetchone()
    return None if row[0] is None else row[0] - time.time()


CORE = max(os.sched_getaffinity(0))


@contextmanager
def stress() -> Iterator[None]:
    """2 stress-ng workers on CORE, in a process group of their own (ended by its id)."""
    proc = subprocess.Popen(["stress-ng", "--cpu", "2", "--taskset", str(CORE), "--timeout", "180s"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        yield
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


@pytest.mark.timeout(240)
async def test_a_loaded_instance_keeps_its_own_leases(tmp_path, fake_anthropic, fake_exa):
    if shutil.which("stress-ng") is None:
        if os.environ.get("CHAT_AGENT_REQUIRE_SERVICES") == "1":
            pytest.fail("stress-ng is not installed and CHAT_AGENT_REQUIRE_SERVICES=1 (.ci/run installs it)")
        pytest.skip("stress-ng is not installed (Debian: apt install stress-ng)")
    server = ServerProcess(tmp_path / "data", server_env(fake_anthropic, fake_exa, CHAT_AGENT_LEASE_SECONDS=str(LEASE)))
    try:
        server.start(timeout=120, preexec_fn=lambda: os.sched_setaffinity(0, {CORE}))
        await _streams(server, tmp_path, fake_anthropic)
    finally:
        if server.proc is not None and server.proc.poll() is None:
            server.stop()


async def _streams(server: ServerProcess, tmp_path, fake_anthropic) -> None:
    db = tmp_path / "data" / "chat-agent.db"
    socks = [await Sock.open(f"s{i}", [server], 0) for i in range(SESSIONS)]
    fake_anthropic.responder = lambda body: Reply("word " * 200, chunk_size=5, delay=0.08)  # ~16 s each
    least, loads = float("inf"), []
    try:
        with stress():
            for sock in socks:
                await sock.send(type="message", content="stream")
            ends = asyncio.gather(*(s.wait(lambda f: f["type"] == "done", timeout=180) for s in socks))
            while not ends.done():
                if (left := headroom(db)) is not None:
                    least = min(least, left)
                loads.append(os.getloadavg()[0])
                await asyncio.sleep(0.25)
            stops = [frame["stopReason"] for _, frame in await ends]
    finally:
        fake_anthropic.responder = None
        await asyncio.gather(*(s.close() for s in socks), return_exceptions=True)
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        turns = dict(conn.execute("SELECT status, count(*) FROM turns GROUP BY status").fetchall())
    log = server.log()
    print(f"\n{SESSIONS} sessions on a core shared with stress-ng (load max {max(loads):.1f}): least lease "
          f"headroom {least:.2f} s of {LEASE:.0f} s; turns {turns}; leases lost {log.count('lost the lease')}")
    assert least > 0, f"a lease the instance held expired ({least:.2f} s past its expiry)"
    assert stops == ["end_turn"] * SESSIONS and turns == {"complete": SESSIONS}
    assert "lost the lease" not in log and "took over" not in log

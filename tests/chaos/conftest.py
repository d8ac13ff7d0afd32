"""Servers for the chaos cases: started as `make_server` starts them, with a start-up wait
that a machine busy with the suite (and these cases' own load) does not run out of, and
stopped on every way out (killed if a stop hangs: a server stopping on a cut database)."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import server_env
from tests.support import ServerProcess

START_TIMEOUT = 120.0  # seconds; a few on a quiet machine


@pytest.fixture
def launch(tmp_path: Path, fake_anthropic, fake_exa) -> Iterator:
    """`launch(n, data_dir=None, **env)`: n servers on the fakes, each in a data dir of its own."""
    started: list[ServerProcess] = []

    def launch(n: int = 1, data_dir: Path | None = None, **env: str) -> list[ServerProcess]:
        servers = [ServerProcess(data_dir or tmp_path / f"data-{uuid.uuid4().hex[:6]}",
                                 server_env(fake_anthropic, fake_exa, **env)) for _ in range(n)]
        started.extend(servers)
        for server in servers:
            server.start(timeout=START_TIMEOUT)
        return servers

    yield launch
    for server in started:
        if server.proc is not None and server.proc.poll() is None:
            try:
                server.stop(timeout=30)
            except subprocess.TimeoutExpired:
                server.proc.kill()
                server.proc.wait(10)

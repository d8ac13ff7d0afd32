"""Fixtures: the fake external services, and the real server pointed at them."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from tests.fakes.anthropic_fake import FakeAnthropic
from tests.fakes.exa_fake import FakeExa
from tests.support import ServerProcess


SMALL_MODEL = "claude-haiku-test"  # titles, summaries and reflections use it in the tests


class ScriptedFake(FakeAnthropic):
    """The fake as the end-to-end tests use it: what a test queues answers the main model's
    calls only, so a background title or reflection call never takes a turn's reply."""

    def enqueue(self, *items, when=None) -> None:
        super().enqueue(*items, when=when or (lambda body: body.get("model") != SMALL_MODEL))

    @property
    def last_main(self):
        return next(r for r in reversed(self.requests) if r.body.get("model") != SMALL_MODEL)

    @property
    def main_bodies(self) -> list[dict]:
        """The bodies of the main model's calls, oldest first."""
        return [r.body for r in self.requests if r.body.get("model") != SMALL_MODEL]


@pytest.fixture(scope="session")
def fake_anthropic() -> Iterator[ScriptedFake]:
    with ScriptedFake() as fake:
        yield fake


@pytest.fixture(scope="session")
def fake_exa() -> Iterator[FakeExa]:
    with FakeExa() as exa:
        yield exa


def server_env(fake_anthropic: FakeAnthropic, fake_exa: FakeExa, **extra: str) -> dict[str, str]:
    return {"ANTHROPIC_BASE_URL": fake_anthropic.base_url, "ANTHROPIC_API_KEY": fake_anthropic.api_key,
            "EXA_BASE_URL": fake_exa.base_url, "EXA_API_KEY": fake_exa.api_key,
            "CHAT_AGENT_LLM_MAX_RETRIES": "1", "CHAT_AGENT_SMALL_MODEL": SMALL_MODEL, **extra}


@pytest.fixture
def make_server(tmp_path: Path, fake_anthropic: FakeAnthropic, fake_exa: FakeExa) -> Iterator:
    """Starts `python server.py` on the fakes; `make_server(**env)`; stopped after the test."""
    started: list[ServerProcess] = []

    def make(data_dir: Path | None = None, **env: str) -> ServerProcess:
        server = ServerProcess(data_dir or tmp_path / "data", server_env(fake_anthropic, fake_exa, **env))
        started.append(server)
        return server.start()

    yield make
    for server in started:
        if server.proc and server.proc.poll() is None:
            server.stop()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, fake_anthropic: FakeAnthropic,
           fake_exa: FakeExa) -> Iterator[ServerProcess]:
    """One server for a whole test module (starting one costs about a second)."""
    proc = ServerProcess(tmp_path_factory.mktemp("server"), server_env(fake_anthropic, fake_exa)).start()
    yield proc
    proc.stop()

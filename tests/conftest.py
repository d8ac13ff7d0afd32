"""Fixtures: the fake external services, and the real server pointed at them."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from tests.fakes.anthropic_fake import FakeAnthropic
from tests.fakes.exa_fake import FakeExa
from tests.fakes.images_fake import FakeImages
from tests import pace
from tests.reaper import pytest_runtest_call, pytest_runtest_teardown  # noqa: F401  (processes a test left: tests/reaper.py)
from tests.support import ServerProcess


SMALL_MODEL = "claude-haiku-test"  # titles, summaries and reflections use it in the tests


class ScriptedFake(FakeAnthropic):
    """The fake as the end-to-end tests use it: what a test queues answers the main model's
    calls only, so a background title or reflection call never takes a turn's reply."""

    def enqueue(self, *items, when=None) -> None:
        super().enqueue(*items, when=when or (lambda body: body.get("model") != SMALL_MODEL))

    def _main(self) -> list:
        # A request is logged as it arrives and its body filled in once read: one still
        # being read (a background call, say) is nobody's yet.
        return [r for r in self.requests if r.body.get("model") not in (None, SMALL_MODEL)]

    @property
    def last_main(self):
        return self._main()[-1]

    @property
    def main_bodies(self) -> list[dict]:
        """The bodies of the main model's calls, oldest first."""
        return [r.body for r in self._main()]


@pytest.fixture(scope="session")
def fake_anthropic() -> Iterator[ScriptedFake]:
    with ScriptedFake() as fake:
        yield fake


@pytest.fixture(autouse=True)
def _empty_script(request: pytest.FixtureRequest) -> None:
    """Each test that scripts the shared fake starts with nothing queued."""
    if "fake_anthropic" in request.fixturenames:
        request.getfixturevalue("fake_anthropic").drop_queue()


@pytest.fixture
async def db(tmp_path: Path):
    """A real SQLite store in a temp dir with its group-commit writer running."""
    from chat_agent.store import SqliteStore
    from chat_agent.store.writer import StoreWriter

    store = SqliteStore(tmp_path / "db.sqlite")
    await store.open()
    writer = StoreWriter(store)
    writer.start()
    yield store, writer
    await writer.close()
    await store.close()


@pytest.fixture(scope="session")
def fake_exa() -> Iterator[FakeExa]:
    with FakeExa() as exa:
        yield exa


@pytest.fixture(scope="session")
def fake_images() -> Iterator[FakeImages]:
    with FakeImages() as images:
        yield images


# One server per session; these give a test it clean, and clean it again afterwards so
# a delay or an unused failure a test left cannot reach the end-to-end tests sharing it.
@pytest.fixture
def exa(fake_exa: FakeExa) -> Iterator[FakeExa]:
    fake_exa.reset()
    yield fake_exa
    fake_exa.reset()


@pytest.fixture
def images_api(fake_images: FakeImages) -> Iterator[FakeImages]:
    fake_images.reset()
    yield fake_images
    fake_images.reset()


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
        server.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, fake_anthropic: FakeAnthropic,
           fake_exa: FakeExa) -> Iterator[ServerProcess]:
    """One server for a whole test module (starting one costs about a second)."""
    with ServerProcess(tmp_path_factory.mktemp("server"), server_env(fake_anthropic, fake_exa)) as proc:
        yield proc


# The longest modules (minutes each, most of it waiting on servers they start), run first: with
# several workers, a long module that starts last keeps one worker busy alone at the end of the
# run. xdist hands out modules in collection order (`--no-loadscope-reorder` in pyproject).
LONGEST_FIRST = (
    "tests/test_sim.py",
    "tests/test_e2e_instances.py",
    "tests/chaos/test_pg_cut.py",
    "tests/test_e2e_jobs.py",
    "tests/chaos/test_owner_faults.py",
    "tests/test_e2e_durability.py",
    "tests/chaos/test_rolling_restart.py",
    "tests/test_e2e_continuation.py",
    "tests/test_e2e_trees.py",
    "tests/chaos/test_disk_full.py",
    "tests/test_e2e_approval.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {path: i for i, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.partition("::")[0], len(rank)))  # stable: the rest keep their order


@pytest.hookimpl(tryfirst=True)
def pytest_timeout_set_timer(item: pytest.Item, settings) -> bool:
    """pytest-timeout's bound (pyproject's `timeout`, or a test's mark) scaled by the load when
    the test starts: a hang is still caught, a test that is slow because the machine is busy
    is not failed for it."""
    import pytest_timeout

    return pytest_timeout.pytest_timeout_set_timer(item, settings._replace(timeout=pace.scaled(settings.timeout)))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call):
    """A failed test that started servers shows the end of their logs in its report: a failure
    seen once in CI on a loaded machine can then be read, not only rerun."""
    outcome = yield
    report = outcome.get_result()
    tmp = getattr(item, "funcargs", {}).get("tmp_path")
    if report.failed and report.when == "call" and isinstance(tmp, Path):
        for log in sorted(tmp.rglob("server*.log"))[:4]:
            lines = log.read_text(errors="replace").splitlines()[-60:]
            report.sections.append((f"{log.relative_to(tmp)} (last {len(lines)} lines)", "\n".join(lines)))


def pytest_terminal_summary(terminalreporter) -> None:
    """Where the browser tests left their screenshots (CI keeps that folder)."""
    from tests.browser import SCREENSHOTS
    if SCREENSHOTS.is_dir() and any(SCREENSHOTS.iterdir()):
        terminalreporter.write_line(f"browser test screenshots: {SCREENSHOTS}")


from tests.browser import axe_source, browser, page  # noqa: E402,F401  (Chromium and axe-core for the canvas page's tests)
from tests.pg import pg_url  # noqa: E402,F401  (a fresh PostgreSQL schema per test: tests/pg.py)
from tests.stores import backend  # noqa: E402,F401  (each store test on SQLite and on PostgreSQL)

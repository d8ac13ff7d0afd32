"""The canvas page's browser tests: Debian's Chromium driven by Playwright (never Playwright's
own browser download), one browser per test module, a page per scenario, and a screenshot of
every scenario under SCREENSHOTS (the test run's summary prints where)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Iterator

import pytest

from tests import pace, reaper
from tests.processes import descendants
from tests.support import ROOT

SCREENSHOTS = ROOT / "test-artifacts" / "screenshots"
REQUIRED = os.environ.get("CHAT_AGENT_REQUIRE_SERVICES") == "1"
VIEWPORT = {"width": 1400, "height": 900}


def chromium_path() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


def is_group_leader(pid: int) -> bool:
    try:
        return os.getpgid(pid) == pid
    except ProcessLookupError:
        return False


def _missing(reason: str) -> None:
    if REQUIRED:
        pytest.fail(f"{reason} and CHAT_AGENT_REQUIRE_SERVICES=1")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def browser() -> Iterator:
    executable = chromium_path()
    if executable is None:
        _missing("Chromium is not installed (apt-get install chromium)")
    try:
        from playwright.sync_api import expect, sync_playwright
    except ImportError:
        _missing("playwright is not installed (the [test] extra)")
    # What the page shows may take a few seconds on a loaded CI machine (two test workers,
    # servers, Chromium on two cores): assertions wait as long as actions do.
    expect.set_options(timeout=pace.scaled(15) * 1000)
    before = set(descendants(os.getpid()))
    with sync_playwright() as playwright:
        # --no-sandbox: CI runs as root in a container, where Chromium's own sandbox cannot start.
        launched = playwright.chromium.launch(executable_path=executable, headless=True,
                                              args=["--no-sandbox", "--disable-dev-shm-usage"])
        # Playwright starts Chromium in a process group of its own; its driver ends it when
        # this process goes, unless the driver is killed too: the watchdog holds it as well.
        chromium = [pid for pid in descendants(os.getpid()) if pid not in before and is_group_leader(pid)]
        for pgid in chromium:
            reaper.adopt(pgid)
        try:
            yield launched
        finally:
            try:
                launched.close()
            finally:
                for pgid in chromium:
                    reaper.end_group(pgid, grace=pace.scaled(5))


@pytest.fixture
def page(browser, request: pytest.FixtureRequest) -> Iterator:
    """A fresh browser context (its own storage) and page; its console errors fail the test,
    and its screenshot is saved whatever the outcome."""
    context = browser.new_context(viewport=VIEWPORT, accept_downloads=True)
    context.set_default_timeout(pace.scaled(15) * 1000)
    opened = context.new_page()
    problems: list[str] = []
    opened.on("pageerror", lambda exc: problems.append(f"page error: {exc}"))
    opened.on("console", lambda m: problems.append(f"console: {m.text}") if m.type == "error" else None)
    opened.problems = problems
    yield opened
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    try:
        opened.screenshot(path=str(SCREENSHOTS / f"{request.node.name}.png"))
    finally:
        context.close()


def no_problems(page, allowed: tuple[str, ...] = ()) -> None:
    """No script error, and no console error but those expected (a 401 the page answered)."""
    left = [p for p in page.problems if not any(a in p for a in allowed)]
    assert not left, left

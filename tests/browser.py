"""The canvas page's browser tests: Debian's Chromium driven by Playwright (never Playwright's
own browser download), one browser per test module, a page per scenario, and a screenshot of
every scenario under SCREENSHOTS (the test run's summary prints where).

Every scenario checks the states it visits with axe-core (`assert_accessible`), at the desktop
and the phone viewport: no critical or serious violation passes. axe-core is pinned in
tests/axe and installed with npm once per run."""

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
PHONE = {"width": 390, "height": 844}
AXE_KIT = Path(__file__).resolve().parent / "axe"
# What fails a scenario. Moderate and minor ones are reported in the failure message too.
BLOCKING = ("critical", "serious")


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


@pytest.fixture(scope="session")
def axe_source(tmp_path_factory) -> str:
    """axe.min.js of the axe-core pinned in tests/axe, installed by `npm ci`."""
    if shutil.which("npm") is None:
        _missing("the accessibility checks need npm for axe-core (apt-get install npm)")
    work = tmp_path_factory.mktemp("axe")
    for name in ("package.json", "package-lock.json"):
        shutil.copy(AXE_KIT / name, work / name)
    reaper.run(["npm", "ci", "--no-audit", "--no-fund", "--ignore-scripts"], cwd=work, check=True,
               capture_output=True, timeout=600)
    return (work / "node_modules" / "axe-core" / "axe.min.js").read_text(encoding="utf-8")


@pytest.fixture
def page(browser, axe_source, request: pytest.FixtureRequest) -> Iterator:
    """A fresh browser context (its own storage) and page; its console errors fail the test,
    and its screenshot is saved whatever the outcome."""
    context = browser.new_context(viewport=VIEWPORT, accept_downloads=True)
    context.set_default_timeout(pace.scaled(15) * 1000)
    opened = context.new_page()
    problems: list[str] = []
    opened.on("pageerror", lambda exc: problems.append(f"page error: {exc}"))
    opened.on("console", lambda m: problems.append(f"console: {m.text}") if m.type == "error" else None)
    opened.problems = problems
    opened.axe_source = axe_source
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


def axe_violations(page) -> list[dict]:
    """axe-core's violations on the page as it is now (WCAG 2.x A/AA and best practices)."""
    # Evaluated rather than added as a <script>: the page's CSP refuses inline scripts, and the
    # tests must not loosen it (test_browser_security.py relies on it).
    if not page.evaluate("() => typeof window.axe === 'object'"):
        page.evaluate(page.axe_source + "\n;0")
    return page.evaluate("""async () => {
        const result = await axe.run(document, { resultTypes: ["violations"] });
        return result.violations.map((v) => ({ id: v.id, impact: v.impact, help: v.help,
            nodes: v.nodes.slice(0, 5).map((n) => n.target.join(" ") + ": " + (n.failureSummary || "").split("\\n")[1]) }));
    }""")


def assert_accessible(page, state: str = "", viewports: tuple[dict, ...] = (VIEWPORT, PHONE)) -> dict[str, dict[str, int]]:
    """axe-core on the page at each viewport (the page's own size restored after): no critical
    or serious violation. Returns the counts by impact per viewport, for the record."""
    original = page.viewport_size
    counts: dict[str, dict[str, int]] = {}
    failures = []
    try:
        for viewport in viewports:
            page.set_viewport_size(viewport)
            page.wait_for_timeout(50)  # a layout pass for the media queries
            found = axe_violations(page)
            name = f"{viewport['width']}x{viewport['height']}"
            counts[name] = {impact: sum(v["impact"] == impact for v in found)
                            for impact in ("critical", "serious", "moderate", "minor")}
            failures += [f"{name} {state}: {v}" for v in found if v["impact"] in BLOCKING]
    finally:
        if original:
            page.set_viewport_size(original)
    assert not failures, "\n".join(failures)
    return counts

"""The documentation cannot drift from the code: what is generated is up to date, every
variable the code reads is documented and every documented one exists, links stay inside the
repository and point at something, and a documented `session.features` is the server's."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from chat_agent.config import Settings
from docs.generate import stale
from tests.support import ROOT, connect

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
CODE = [ROOT / "server.py", *(ROOT / "chat_agent").rglob("*.py"), *(ROOT / "tools").rglob("*.py")]
TESTS = list((ROOT / "tests").rglob("*.py"))
OURS = re.compile(r"\bCHAT_AGENT_[A-Z0-9_]*[A-Z0-9]\b")
# What the tests read from their environment (not what they set for a server they start).
TESTS_READ = re.compile(r"(?:environ\.get\(|environ\[|getenv\()\"(CHAT_AGENT_[A-Z0-9_]+)\"")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def test_generated_docs_are_up_to_date():
    assert not stale(), f"{[str(p.relative_to(ROOT)) for p in stale()]} differ: run python docs/generate.py"


def test_every_variable_is_documented_and_every_documented_one_exists():
    documented = {name for path in DOCS for name in OURS.findall(path.read_text())}
    read = (set(Settings.variables()) | {name for path in CODE for name in OURS.findall(path.read_text())}
            | {name for path in TESTS for name in TESTS_READ.findall(path.read_text())})
    ours = {name for name in read if name.startswith("CHAT_AGENT_")}
    assert not ours - documented, f"read by the code but documented nowhere: {sorted(ours - documented)}"
    # Documented, and only set by a test or a client of ours: fine as long as something reads it.
    mentioned = {name for path in TESTS for name in OURS.findall(path.read_text())}
    assert not documented - read - mentioned, f"documented but read nowhere: {sorted(documented - read - mentioned)}"
    configuration = (ROOT / "docs" / "configuration.md").read_text()
    missing = [name for name in Settings.variables() if f"`{name}`" not in configuration]
    assert not missing, f"settings missing from docs/configuration.md: {missing}"


def _targets():
    for path in DOCS:
        for target in LINK.findall(path.read_text()):
            yield path, target


def test_links_stay_in_the_repository_and_point_at_something():
    wrong = []
    for path, target in _targets():
        if target.startswith(("http://", "https://", "mailto:")):
            continue  # the web, named as such (AG-UI's site, procrastinate's docs, 127.0.0.1)
        file, _, anchor = target.partition("#")
        where = (path.parent / file).resolve() if file else path
        if not where.is_relative_to(ROOT):
            wrong.append(f"{path.relative_to(ROOT)}: {target} leaves the repository")
        elif not where.exists():
            wrong.append(f"{path.relative_to(ROOT)}: {target} points at nothing")
        elif anchor and where.suffix == ".md" and anchor not in _anchors(where):
            wrong.append(f"{path.relative_to(ROOT)}: {target} names no heading of {where.name}")
    assert not wrong, "\n".join(wrong)


def _anchors(path: Path) -> set[str]:
    """GitHub's anchors of a Markdown file's headings."""
    headings = re.findall(r"^#+ (.+)$", path.read_text(), re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def test_the_readme_is_a_front_door():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 150
    assert "](docs/images/canvas.png)" in readme
    assert "python3 -m venv .venv && .venv/bin/pip install -q -e . && .venv/bin/python server.py" in readme


@pytest.fixture(scope="module")
def features(server) -> list[str]:
    import asyncio

    async def read() -> list[str]:
        ws, session = await connect(server)
        await ws.close()
        return session["features"]

    return asyncio.run(read())


def test_documented_features_are_the_servers(features):
    found = [(path, match) for path in DOCS
             for match in re.findall(r"`?session\.features`? (?:is|lists)[^`\[]*`(\[[^\]]*\])`", path.read_text())]
    assert found, "no documented session.features list"
    for path, listed in found:
        assert re.findall(r'"(\w+)"', listed) == features, f"{path.relative_to(ROOT)}: {listed} != {features}"

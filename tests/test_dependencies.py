"""What the server imports is declared in pyproject.toml, and a private module of a dependency
(`anthropic.lib.streaming._messages`) is imported only from one with an upper bound: a
fresh install must not depend on what another package happens to pull in, nor break on the
next major version of a module its authors never promised to keep."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

from tests.support import ROOT

FIRST_PARTY = {"chat_agent", "tools"}


def _requirements() -> dict[str, str]:
    """{normalized distribution name: its requirement} of the runtime dependencies."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    found = {}
    for requirement in project["dependencies"]:
        name = re.match(r"[A-Za-z0-9._-]+", requirement).group(0)
        found[_normal(name)] = requirement
    return found


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _imports() -> dict[str, set[str]]:
    """{imported module path: files importing it}, absolute imports of the shipped code."""
    found: dict[str, set[str]] = {}
    files = [ROOT / "server.py", *(ROOT / "chat_agent").rglob("*.py"), *(ROOT / "tools").rglob("*.py")]
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                found.setdefault(name, set()).add(str(path.relative_to(ROOT)))
    return found


def test_every_imported_distribution_is_declared():
    declared = _requirements()
    owners = importlib.metadata.packages_distributions()
    missing = []
    for module, where in sorted(_imports().items()):
        top = module.split(".")[0]
        if top in FIRST_PARTY or top in sys.stdlib_module_names:
            continue
        distributions = {_normal(d) for d in owners.get(top, [top])}
        if not distributions & set(declared):
            missing.append(f"{module} ({', '.join(sorted(distributions))}) in {', '.join(sorted(where))}")
    assert not missing, "imported but not declared in pyproject.toml:\n" + "\n".join(missing)


def test_private_modules_come_from_bounded_dependencies():
    declared = _requirements()
    owners = importlib.metadata.packages_distributions()
    unbounded = []
    for module in _imports():
        top, *rest = module.split(".")
        if top in FIRST_PARTY or not any(part.startswith("_") for part in rest):
            continue
        for distribution in owners.get(top, [top]):
            requirement = declared.get(_normal(distribution), "")
            if "<" not in requirement:
                unbounded.append(f"{module}: {requirement or distribution + ' (not declared)'}")
    assert not unbounded, "a private module of a dependency without an upper bound:\n" + "\n".join(unbounded)

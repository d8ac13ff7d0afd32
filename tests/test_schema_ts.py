"""What a TypeScript client does with `GET /api/protocol`: json-schema-to-typescript makes its
types, and `tsc --strict` compiles tests/ts/exhaustive.ts, whose `switch (frame.type)` over
ServerFrame and ClientFrame must be exhaustive. The versions are pinned by tests/ts/package-lock.json.

Needs node and npm (and the npm registry, once per run, for `npm ci`); without them the tests
skip and say so, unless CHAT_AGENT_REQUIRE_SERVICES=1 (CI), where that is a failure."""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests import reaper
from tests.support import ROOT

KIT = ROOT / "tests" / "ts"


def _missing_node() -> str | None:
    missing = [tool for tool in ("node", "npm") if shutil.which(tool) is None]
    return f"{' and '.join(missing)} not installed (apt-get install nodejs npm)" if missing else None


@pytest.fixture(scope="module")
def kit(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of tests/ts with its pinned packages installed."""
    reason = _missing_node()
    if reason:
        if os.environ.get("CHAT_AGENT_REQUIRE_SERVICES") == "1":
            pytest.fail(f"the TypeScript check cannot run: {reason}")
        pytest.skip(f"the TypeScript check cannot run: {reason}")
    work = tmp_path_factory.mktemp("ts")
    for name in ("package.json", "package-lock.json", "exhaustive.ts"):
        shutil.copy(KIT / name, work / name)
    run(work, "npm", "ci", "--no-audit", "--no-fund", "--ignore-scripts", timeout=600)
    return work


def run(cwd: Path, *command: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return reaper.run(command, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          check=command[0] == "npm")


def compile_against(kit: Path, schema: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    """Generates protocol.ts from `schema` and type-checks exhaustive.ts against it."""
    (kit / "schema.json").write_text(json.dumps(schema))
    generated = run(kit, "node_modules/.bin/json2ts", "-i", "schema.json", "-o", "protocol.ts")
    assert generated.returncode == 0, generated.stderr
    return run(kit, "node_modules/.bin/tsc", "--noEmit", "--strict", "--target", "es2022", "--module", "commonjs",
               "protocol.ts", "exhaustive.ts")


@pytest.fixture(scope="module")
def schema(server) -> dict[str, Any]:
    status, document = server.get("/api/protocol")
    assert status == 200
    return document


@pytest.mark.timeout(900)
def test_the_schema_compiles_to_types_a_switch_covers(kit, schema):
    checked = compile_against(kit, schema)
    assert checked.returncode == 0, (
        "tsc refused tests/ts/exhaustive.ts against the generated types (a new frame type needs its case "
        f"there):\n{checked.stdout}{checked.stderr}")
    generated = (kit / "protocol.ts").read_text()
    assert "export type ServerFrame =" in generated and "export type ClientFrame =" in generated


@pytest.mark.timeout(900)
def test_an_optional_type_would_not_compile(kit, schema):
    """The check above can fail: with `type` optional in one frame the switch is not exhaustive."""
    loose = copy.deepcopy(schema)
    loose["$defs"]["ContentChunk"]["required"].remove("type")
    checked = compile_against(kit, loose)
    assert checked.returncode != 0 and "exhaustive.ts" in checked.stdout and "never" in checked.stdout

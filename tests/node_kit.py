"""A Node.js client check kit (a folder with package.json, package-lock.json and a script, such
as tests/aisdk): installed with `npm ci` in a temporary folder, run with `node`. Without node
and npm the check is skipped with the reason shown, or fails where CI requires every service."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests import pace, reaper


def install(kit: Path, work: Path, what: str) -> Path:
    missing = [tool for tool in ("node", "npm") if shutil.which(tool) is None]
    if missing:
        reason = f"{what} needs {' and '.join(missing)} (apt-get install nodejs npm)"
        if os.environ.get("CHAT_AGENT_REQUIRE_SERVICES") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    for path in kit.iterdir():
        if path.is_file():
            shutil.copy(path, work / path.name)
    reaper.run(["npm", "ci", "--no-audit", "--no-fund", "--ignore-scripts"], cwd=work, check=True,
               capture_output=True, timeout=600)
    return work


async def run(kit: Path, script: str, *args: str, timeout: float = 90) -> str:
    """The script's standard output; its standard error in the failure when it fails."""
    proc = await reaper.spawn_async("node", script, *args, cwd=kit, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        out, err = await asyncio.wait_for(proc.communicate(), pace.scaled(timeout))
    finally:
        await reaper.end_async(proc)
    assert proc.returncode == 0, err.decode()
    return out.decode()

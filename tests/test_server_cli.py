"""`server.py` as a self-hoster starts it: `--help` lists the real flags, a `.env` file is
read (the current directory's, or `--env-file`), the environment wins over it and a flag over
both; and the no-key path of docs/try-it.md (the fake APIs writing an env file) streams a reply."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.support import ROOT, ServerProcess, connect, free_port, send, text_of, until

# The developer's own settings must not reach these servers: empty counts as unset.
CLEAN = {name: "" for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "CHAT_AGENT_API_KEYS",
                               "CHAT_AGENT_MAX_CONTEXT_TOKENS", "EXA_API_KEY", "EXA_BASE_URL")}


def test_help_lists_the_flags():
    done = subprocess.run([sys.executable, "server.py", "--help"], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0
    for flag in ("--host", "--port", "--data-dir", "--demo", "--env-file", "--log-level"):
        assert flag in done.stdout
    assert "docs/configuration.md" in done.stdout


def test_a_missing_env_file_is_one_clear_line(tmp_path):
    done = subprocess.run([sys.executable, "server.py", "--env-file", str(tmp_path / "nope.env")], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stderr.strip() == f"chat-agent: --env-file {tmp_path / 'nope.env'}: no such file"


async def test_env_file_the_environment_and_flags_in_that_order(tmp_path):
    env_file = tmp_path / "prod.env"
    env_file.write_text("# as an operator writes it\nCHAT_AGENT_API_KEYS=ann:t0ken\n"
                        "export CHAT_AGENT_MAX_CONTEXT_TOKENS=123456\nCHAT_AGENT_THINKING_BUDGET=2048\n")
    port = free_port()
    server = ServerProcess(tmp_path / "data", {**CLEAN, "CHAT_AGENT_THINKING_BUDGET": "1024"},
                           args=("--env-file", str(env_file), "--port", str(port)))
    assert server.env["CHAT_AGENT_PORT"] != str(port)  # the flag, not the variable, decides
    server.port = port
    server.start(timeout=60)
    try:
        assert server.get("/api/conversations")[0] == 401  # auth from the file
        ws, session = await connect(server, token="t0ken")
        assert session["context"]["maxTokens"] == 123456
        await ws.close()
    finally:
        server.stop()


async def test_the_current_directorys_env_file(tmp_path):
    (tmp_path / ".env").write_text("CHAT_AGENT_MAX_CONTEXT_TOKENS=4242\n")
    port = free_port()
    env = {**os.environ, **CLEAN, "CHAT_AGENT_PORT": str(port), "CHAT_AGENT_DATA_DIR": str(tmp_path / "data"),
           "CHAT_AGENT_LOG_LEVEL": "WARNING"}
    proc = subprocess.Popen([sys.executable, str(ROOT / "server.py")], cwd=tmp_path, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    server = ServerProcess(tmp_path / "data", {})
    server.port, server.proc = port, proc
    try:
        await _until_up(server)
        ws, session = await connect(server)
        assert session["context"]["maxTokens"] == 4242
        await ws.close()
    finally:
        server.stop()


async def test_the_fake_apis_env_file_streams_a_real_turn(tmp_path):
    env_file = tmp_path / "fakes.env"
    fakes = subprocess.Popen([sys.executable, "-m", "tests.fakes.serve", "--env-file", str(env_file)], cwd=ROOT,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not (env_file.exists() and "EXA_API_KEY" in env_file.read_text()):
            assert fakes.poll() is None and time.monotonic() < deadline, "the fakes did not start"
            time.sleep(0.05)
        server = ServerProcess(tmp_path / "data", CLEAN, args=("--env-file", str(env_file))).start(timeout=60)
        try:
            ws, session = await connect(server)
            assert {t["name"]: t["enabled"] for t in session["tools"]}["web_search"]
            await send(ws, type="message", content="Hello there")
            frames = await until(ws, "done", timeout=60)
            assert frames[-1]["stopReason"] == "end_turn" and text_of(frames), json.dumps(frames)[:500]
            await ws.close()
        finally:
            server.stop()
    finally:
        os.killpg(fakes.pid, signal.SIGTERM)
        fakes.wait(15)


async def _until_up(server: ServerProcess) -> None:
    import asyncio
    import urllib.request
    deadline = time.monotonic() + 60
    while True:
        assert server.proc.poll() is None, "the server exited"
        try:
            with urllib.request.urlopen(server.http_url + "/health", timeout=1):
                return
        except OSError:
            assert time.monotonic() < deadline, "the server did not start"
            await asyncio.sleep(0.05)

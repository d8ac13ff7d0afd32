"""A sandbox never outlives its server: `kill -9` the real server while the model's code runs,
and nothing of the sandbox lives on past its time limit; the next start removes its temp dir."""

from __future__ import annotations

import os
import signal
import time

import pytest

from tests.fakes.anthropic_fake import Reply, ToolUse
from tests.processes import alive, descendants, marked, new_marker, poll, sigkill_all
from tests.support import connect, recv, send

LIMIT = 3.0  # CHAT_AGENT_CODE_TIMEOUT of these servers


def sandbox_dirs(data_dir) -> list[str]:
    scratch = data_dir / "sandbox"
    return sorted(p.name for p in scratch.iterdir()) if scratch.is_dir() else []


async def test_killing_the_server_ends_its_sandbox_and_a_restart_removes_its_dir(make_server, fake_anthropic):
    server = make_server(CHAT_AGENT_CODE_TIMEOUT=str(LIMIT))
    ws, session = await connect(server)
    tool = {t["name"]: t for t in session["tools"]}["code_interpreter"]
    if not tool["enabled"]:
        if os.environ.get("CHAT_AGENT_REQUIRE_SERVICES") == "1":
            pytest.fail(f"code_interpreter is not offered: {tool['reason']}")
        pytest.skip(f"code_interpreter is not offered here: {tool['reason']}")
    marker = new_marker()  # a process that left the sandbox's session, found by its command line
    code = f"import subprocess, time\nsubprocess.Popen(['sleep', '{marker}'], start_new_session=True)\ntime.sleep(900)"
    fake_anthropic.enqueue(Reply([ToolUse("code_interpreter", {"code": code})]), Reply("Never reached."))
    await send(ws, type="message", content="Run it")
    tree: list[int] = []
    try:
        while (frame := await recv(ws))["type"] != "tool_start":
            assert frame["type"] != "done", frame
        assert poll(lambda: bool(marked(marker)), 10), "the sandbox did not start"
        tree = sorted(set(descendants(server.proc.pid) + marked(marker)))
        assert len(tree) >= 4, tree  # bwrap (the launcher became it), its PID 1 (timeout), python, sleep
        [left] = sandbox_dirs(server.data_dir)

        server.stop(signal.SIGKILL)
        killed_at = time.monotonic()
        assert poll(lambda: not any(alive(pid) for pid in tree), LIMIT), (
            f"still alive {LIMIT:g} s after the server was killed: {[p for p in tree if alive(p)]}")
        print(f"the sandbox ended {time.monotonic() - killed_at:.3f} s after the server was killed")
        assert sandbox_dirs(server.data_dir) == [left]  # nobody was left to remove it

        restarted = make_server(data_dir=server.data_dir, CHAT_AGENT_CODE_TIMEOUT=str(LIMIT))
        assert sandbox_dirs(restarted.data_dir) == []
        assert restarted.get("/health")[0] == 200
    finally:
        sigkill_all([pid for pid in tree if alive(pid)])

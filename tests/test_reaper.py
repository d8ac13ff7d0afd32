"""What a test starts dies with it, however the test ends (tests/reaper.py): a child pytest
runs tests that start a real server (and a shell with a child of its own) and then fail,
hang into pytest-timeout, are interrupted by Ctrl-C, or kill their own xdist worker; once
that pytest is done, none of what they started is still running."""

from __future__ import annotations

import json
import os
import signal
import sys
import textwrap
from pathlib import Path

from tests import pace, reaper
from tests.browser import chromium_path
from tests.processes import alive, cmdline, poll
from tests.support import ROOT

CHILD_TESTS = textwrap.dedent('''
    import json, os, signal, time
    from pathlib import Path

    import pytest

    from tests import reaper
    from tests.processes import cmdline, descendants

    def record(*pgids):
        """Every live process of these groups, for the outer test to look for afterwards."""
        with open(os.environ["REAPER_RECORD"], "a") as out:
            for pgid in pgids:
                for pid in reaper.members(pgid):
                    out.write(json.dumps([pid, cmdline(pid)]) + "\\n")

    def started(server):
        """The server, and a shell in a group of the test's own that left a child behind."""
        shell = reaper.spawn(["sh", "-c", "sleep 86123 & exec sleep 86124"])
        while len(reaper.members(shell.pid)) < 2:
            time.sleep(0.01)
        record(server.proc.pid, shell.pid)

    def test_fails(make_server):
        started(make_server())
        assert False, "a failing test"

    @pytest.mark.timeout(3, func_only=True)
    def test_hangs(server):
        started(server)
        time.sleep(600)

    def test_interrupted(make_server):
        started(make_server())
        # As at a terminal: a pytest started by an xdist worker inherits SIGINT ignored.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(60)

    def test_worker_killed(make_server, request):
        started(make_server())
        if os.environ.get("REAPER_BROWSER"):
            request.getfixturevalue("browser").new_page().goto("about:blank")
            with open(os.environ["REAPER_RECORD"], "a") as out:
                for pid in descendants(os.getpid()):
                    if "chromium" in cmdline(pid):
                        out.write(json.dumps([pid, cmdline(pid)]) + "\\n")
        os.kill(os.getpid(), signal.SIGKILL)
''')

CHILD_CONFTEST = "from tests.conftest import *  # noqa: F401,F403  (the suite's fixtures and hooks)\n"
CHILD_INI = "[pytest]\nasyncio_mode = auto\nasyncio_default_fixture_loop_scope = function\ntimeout = 120\n"


def run_child(tmp_path: Path, test: str, *options: str, **env: str) -> tuple[int, str, list[tuple[int, str]]]:
    """Runs one of CHILD_TESTS in a pytest of its own; its exit code, output and the processes
    its test started."""
    (tmp_path / "test_child.py").write_text(CHILD_TESTS)
    (tmp_path / "conftest.py").write_text(CHILD_CONFTEST)
    (tmp_path / "pytest.ini").write_text(CHILD_INI)
    record = tmp_path / "started.jsonl"
    done = reaper.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *options,
                       f"test_child.py::{test}"], cwd=tmp_path, capture_output=True, text=True,
                      timeout=pace.scaled(120), env={**os.environ, "PYTHONPATH": str(ROOT), "REAPER_RECORD": str(record),
                                                     **env})
    started = [tuple(json.loads(line)) for line in record.read_text().splitlines()] if record.exists() else []
    return done.returncode, done.stdout + done.stderr, started  # type: ignore[return-value]


def still_running(started: list[tuple[int, str]]) -> list[tuple[int, str]]:
    return [(pid, line) for pid, line in started if alive(pid) and cmdline(pid) == line]


def assert_all_ended(started: list[tuple[int, str]], output: str, within: float = 0.0) -> None:
    assert any("server.py" in line for _, line in started), output
    assert sum("sleep 8612" in line for _, line in started) == 2, started  # the shell's child too
    poll(lambda: not still_running(started), within)
    left = still_running(started)
    for pid, _ in left:  # this test's failure must not leak them either
        os.kill(pid, signal.SIGKILL)
    assert not left, f"left running: {left}\n{output}"


def test_a_failing_test_leaves_nothing_running(tmp_path: Path) -> None:
    code, output, started = run_child(tmp_path, "test_fails")
    assert code == 1 and "a failing test" in output, output
    assert_all_ended(started, output)  # at once: the fixtures and the sweep ended them


def test_a_test_stopped_by_pytest_timeout_leaves_nothing_running(tmp_path: Path) -> None:
    code, output, started = run_child(tmp_path, "test_hangs", CHAT_AGENT_TEST_PACE="1")
    assert code == 1 and "Timeout" in output, output
    assert_all_ended(started, output)


def test_an_interrupted_run_leaves_nothing_running(tmp_path: Path) -> None:
    code, output, started = run_child(tmp_path, "test_interrupted")
    assert code == 2 and "KeyboardInterrupt" in output, output
    assert_all_ended(started, output)


def test_a_killed_xdist_worker_leaves_nothing_running(tmp_path: Path) -> None:
    """The worker gets no chance to clean up: its watchdog ends what it had started."""
    browser = {"REAPER_BROWSER": "1"} if chromium_path() else {}
    code, output, started = run_child(tmp_path, "test_worker_killed", "-n", "1", **browser)
    assert code == 1 and "crashed" in output, output
    if browser:
        assert any("chromium" in line for _, line in started), output
    assert_all_ended(started, output, within=pace.scaled(15))

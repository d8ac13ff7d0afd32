"""The sandbox's disk quota and the bound on what a run reports, with real bubblewrap: a run
that writes 30 files of 40 MB fills its 100 MB work dir and no more (nothing lands on the
host's disk), says which limit it hit, and still hands back what fits; files the code wrote
before the time limit killed it still come back; and the notes on files not returned stay
short however many files with however long names the code writes.

End to end, through the server: the reproduction of the adversarial pass (15 nested directories
of 250-character names, then thousands of 200-character file names) stores a few KB, not 27 MB.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import time
from pathlib import Path

import pytest

from tests.fakes.anthropic_fake import Reply, ToolUse
from tests.support import connect, send, until
from tools.sandbox.runner import SandboxLimits, probe, run_python

REASON = probe()
REQUIRED = bool(os.environ.get("CHAT_AGENT_REQUIRE_SERVICES"))
pytestmark = pytest.mark.skipif(REASON is not None and not REQUIRED, reason=f"no sandbox here: {REASON}")

LIMITS = SandboxLimits(wall_seconds=30, cpu_seconds=30, memory_mb=256, processes=16, file_mb=50, disk_mb=100)


def _disk_used(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


async def test_the_work_dir_holds_no_more_than_its_quota(tmp_path: Path) -> None:
    code = """
import os
written = 0
for i in range(30):
    try:
        with open(f"big{i}.bin", "wb") as f:
            for _ in range(40):
                f.write(bytes(1 << 20))
                written += 1 << 20
    except OSError as exc:
        print("stopped at file", i, exc.strerror, written // (1 << 20), "MB")
        break
st = os.statvfs(".")
print("work dir size", st.f_blocks * st.f_frsize // (1 << 20), "MB")
"""
    before = shutil.disk_usage(tmp_path).used
    result = await run_python(code, [], limits=LIMITS, scratch=tmp_path)
    assert result.exit_code == 0, result.stderr
    assert "No space left on device" in result.stdout and "work dir size 100 MB" in result.stdout
    written = int(result.stdout.split("No space left on device ")[1].split()[0])
    assert 90 <= written <= 100
    assert "disk quota of 100 MB is full" in result.stderr
    # What fits the 50 MB of returned files comes back; the host's disk never held the 100 MB.
    assert [f.name for f in result.files] == ["big0.bin"] and len(result.files[0].data) == 40 << 20
    assert "files not returned" in result.stderr and "big1.bin" in result.stderr
    assert _disk_used(tmp_path) < 1 << 20
    assert shutil.disk_usage(tmp_path).used - before < 50 << 20


async def test_files_written_before_the_time_limit_come_back() -> None:
    code = "import time\nopen('partial.txt', 'w').write('so far')\nprint('wrote', flush=True)\ntime.sleep(60)"
    started = time.monotonic()
    result = await run_python(code, [], limits=SandboxLimits(wall_seconds=1, cpu_seconds=5))
    assert time.monotonic() - started < 8
    assert result.timed_out and result.exit_code is None and "time limit was reached" in result.stderr
    assert [(f.name, f.data) for f in result.files] == [("partial.txt", b"so far")]


async def test_notes_on_files_not_returned_stay_short() -> None:
    code = """
import os
path = "."
for depth in range(15):
    path = os.path.join(path, chr(97 + depth) * 250)
    os.mkdir(path)
for i in range(3000):
    open(os.path.join(path, f"{i:04d}" + "n" * 196), "w").write("x")
"""
    result = await run_python(code, [], limits=LIMITS)
    assert result.exit_code == 0, result.stderr
    assert len(result.files) == 100
    note = result.stderr[result.stderr.index("files not returned"):]
    assert len(note) < 4_000 and "and 2,880 more" in note


async def test_the_27_mb_reproduction_stores_a_few_kb(make_server, fake_anthropic, tmp_path: Path) -> None:
    code = """
import os, time
path = "."
for depth in range(15):
    path = os.path.join(path, chr(97 + depth) * 250)
    os.mkdir(path)
deadline, i = time.monotonic() + 7, 0
while time.monotonic() < deadline:
    for _ in range(200):
        try:
            open(os.path.join(path, f"{i:08d}" + "n" * 192), "w").close()
        except OSError:
            deadline = 0
            break
        i += 1
print("made", i, "files")
"""
    server = make_server(CHAT_AGENT_CODE_TIMEOUT="20")
    fake_anthropic.enqueue(Reply([ToolUse("code_interpreter", {"code": code})]), Reply("Done."))
    ws, session = await connect(server)
    db = server.data_dir / "chat-agent.db"
    await send(ws, type="message", content="make files")
    frames = await until(ws, "done", timeout=90)
    end = next(f for f in frames if f["type"] == "tool_end")
    assert not end["isError"] and "made" in end["output"]["stdout"]
    await ws.close()
    status, body = server.get(f"/api/conversations/{session['conversationId']}")
    assert status == 200
    size = len(str(body).encode())
    assert size <= 50_000, size
    with sqlite3.connect(db) as conn:
        stored = sum(len(row[0]) for row in conn.execute("SELECT data FROM history_items"))
        stored += sum(len(row[0]) for row in conn.execute("SELECT frame FROM events"))
    print(f"27 MB reproduction: served {size:,} bytes, stored {stored:,}")
    assert stored <= 150_000, stored  # three copies at most: the model's, the visible history's, the event log's

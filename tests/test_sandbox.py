"""The code sandbox, attacked from inside: real bubblewrap, real processes, no mocks.

Skipped only if `probe()` says bubblewrap cannot work on this machine; under CI
(CHAT_AGENT_REQUIRE_SERVICES=1) a missing bubblewrap fails instead.
"""

from __future__ import annotations

import asyncio
import io
import json
import multiprocessing
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

import pytest
from PIL import Image

from tools.sandbox.runner import SELF_KILL_GRACE, SandboxFile, SandboxLimits, SandboxResult, probe, run_python
from tests import pace
from tests.cancelling import cancel_within
from tests.processes import alive, cmdline, descendants, marked, new_marker, ours, poll, sigkill_all, wait_for_tree

REASON = probe()
REQUIRED = bool(os.environ.get("CHAT_AGENT_REQUIRE_SERVICES"))
pytestmark = pytest.mark.skipif(REASON is not None and not REQUIRED, reason=f"no sandbox here: {REASON}")

FAST = SandboxLimits(wall_seconds=10, cpu_seconds=2, memory_mb=256, processes=16)
SECRET = "s3cret-9f1c2b"


async def run(code: str, files: list[SandboxFile] | None = None, **kwargs) -> SandboxResult:
    kwargs.setdefault("limits", FAST)
    return await run_python(code, files or [], **kwargs)


def test_probe() -> None:
    assert "not installed: no-such-bwrap" in (probe("no-such-bwrap") or "")
    assert REASON is None, REASON  # reached only where it works, or where CI requires it


async def test_the_servers_environment_is_not_passed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHAT_AGENT_TEST_SECRET", SECRET)
    code = """
import os, glob
print(sorted(os.environ))
for path in glob.glob("/proc/*/environ"):
    try:
        print(path, open(path, "rb").read())
    except OSError as exc:
        print(path, exc)
"""
    result = await run(code)
    assert result.exit_code == 0, result.stderr
    assert SECRET not in result.stdout + result.stderr
    assert "['HOME', 'LANG', 'PATH', 'PWD', 'PYTHONDONTWRITEBYTECODE']" in result.stdout


async def test_host_files_are_out_of_reach(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    (data_dir / "secret.txt").write_text(SECRET)
    targets = [data_dir / "secret.txt", data_dir, Path(__file__), Path("/etc/passwd"), Path("/proc/1/root/etc")]
    home = Path.home()
    code = f"""
import json, os
for path in {[str(t) for t in targets]!r}:
    try:
        print(path, "READ", open(path).read() if os.path.isfile(path) else os.listdir(path))
    except OSError as exc:
        print(path, "DENIED", type(exc).__name__)
print(json.dumps(sorted(os.listdir({str(home)!r})) if os.path.isdir({str(home)!r}) else []))
"""
    result = await run(code)
    assert result.exit_code == 0, result.stderr
    assert SECRET not in result.stdout
    assert result.stdout.count("DENIED") == len(targets), result.stdout
    # Of the server's home, only the way to a Python installation inside it is there.
    roots = {Path(p) for p in (sys.prefix, sys.base_prefix)}
    ways_in = {r.relative_to(home).parts[0] for r in roots if r.is_relative_to(home)}
    assert json.loads(result.stdout.splitlines()[-1]) == sorted(ways_in)


async def test_no_network_even_to_the_loopback() -> None:
    connected = asyncio.Event()
    server = await asyncio.start_server(lambda r, w: connected.set(), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    code = f"""
import socket
for host in ("127.0.0.1", "1.1.1.1"):
    try:
        socket.create_connection((host, {port}), timeout=2)
        print(host, "CONNECTED")
    except OSError as exc:
        print(host, "FAILED", exc)
"""
    async with server:
        result = await run(code)
        await asyncio.sleep(0.1)
    assert "CONNECTED" not in result.stdout and result.stdout.count("FAILED") == 2, result
    assert not connected.is_set()


async def test_writes_land_only_in_the_work_dir() -> None:
    site = next(p for p in sys.path if p.endswith("site-packages"))
    targets = [f"{site}/evil.py", f"{sys.base_prefix}/evil", "/usr/evil", "/evil", "/dev/evil", "/proc/1/root/evil"]
    code = f"""
for path in {targets!r}:
    try:
        open(path, "w").write("x")
        print(path, "WROTE")
    except OSError as exc:
        print(path, "DENIED", type(exc).__name__)
open("/tmp/scratch", "w").write("private tmpfs")
open("ok.txt", "w").write("mine")
"""
    result = await run(code)
    assert result.exit_code == 0, result.stderr
    assert result.stdout.count("DENIED") == len(targets), result.stdout
    assert not any(os.path.exists(t) for t in targets)
    assert [f.name for f in result.files] == ["ok.txt"]


async def test_scratch_space_is_small_but_usable() -> None:
    code = """
import multiprocessing, os
for scratch in ("/tmp", "/dev/shm"):
    try:
        for i in range(3):
            open(f"{scratch}/{i}", "wb").write(bytes(600_000))
    except OSError as exc:
        print(scratch, "FULL at", i, exc.strerror)
    for i in range(3):  # only ours: the Python installation may be mounted under /tmp too
        if os.path.exists(f"{scratch}/{i}"):
            os.remove(f"{scratch}/{i}")
with multiprocessing.Pool(2) as pool:  # needs /dev/shm
    print(pool.map(abs, [-1, -2]))
"""
    result = await run(code, limits=SandboxLimits(file_mb=1))
    assert result.exit_code == 0, result.stderr
    full = "FULL at 1 No space left on device"
    assert result.stdout == f"/tmp {full}\n/dev/shm {full}\n[1, 2]\n"


async def test_cpu_loop_is_stopped_by_the_cpu_limit() -> None:
    started = time.monotonic()
    # A second of CPU takes longer on a busy machine (the wall clock must not strike first).
    result = await run("while True: pass", limits=SandboxLimits(cpu_seconds=1, wall_seconds=pace.scaled(5)))
    assert time.monotonic() - started < pace.scaled(4)
    assert result.exit_code == 128 + signal.SIGXCPU and not result.timed_out
    assert "SIGXCPU (the CPU time limit)" in result.stderr


async def test_wall_clock_limit_kills_a_sleeper() -> None:
    started = time.monotonic()
    code = "import time; print('start', flush=True); time.sleep(60)"
    result = await run(code, limits=SandboxLimits(wall_seconds=0.5))
    assert time.monotonic() - started < 0.5 + pace.scaled(1.0)
    assert result.timed_out and result.exit_code is None
    assert result.stdout == "start\n" and "time limit was reached" in result.stderr


async def test_memory_hog_fails() -> None:
    result = await run("blob = bytearray(400 * 1024 * 1024)\nprint('allocated')")
    assert result.exit_code == 1 and "MemoryError" in result.stderr
    assert "allocated" not in result.stdout


async def test_process_count_is_limited() -> None:
    code = """
import os, time
n = 0
try:
    while True:
        if os.fork() == 0:
            time.sleep(60)
            os._exit(0)
        n += 1
except OSError as exc:
    print("forks", n, exc.strerror)
"""
    started = time.monotonic()
    result = await run(code)
    assert time.monotonic() - started < pace.scaled(3)  # its sleeping children die with it
    forks = int(result.stdout.split()[1])
    assert 0 < forks < FAST.processes, result.stdout


async def test_fork_bomb_is_contained_and_cleaned_up() -> None:
    before = ours()
    started = time.monotonic()
    bomb = "import os\nwhile True:\n    try: os.fork()\n    except OSError: pass"
    neighbour = "import os, time\ntime.sleep(0.5)\nfor _ in range(8):\n    if os.fork() == 0: os._exit(0)\nprint('ok')"
    bombed, other = await asyncio.gather(
        run(bomb, limits=SandboxLimits(wall_seconds=1.5, processes=16)), run(neighbour, limits=FAST)
    )
    assert time.monotonic() - started < pace.scaled(4)
    assert bombed.timed_out
    assert other.stdout == "ok\n", other  # a bomb next door takes no process of its own
    assert ours() == before


async def test_output_is_capped_without_blocking() -> None:
    code = "import sys\nsys.stdout.write('o' * 5_000_000)\nsys.stderr.write('é' * 3_000_000 + 'done')"
    started = time.monotonic()
    result = await run(code, limits=SandboxLimits(output_chars=1000))
    assert time.monotonic() - started < pace.scaled(5)
    assert result.exit_code == 0
    assert result.stdout.startswith("o" * 1000 + "\n[output truncated to 1,000 characters; 5,000,000 bytes in all]")
    assert result.stderr.startswith("é" * 1000 + "\n[output truncated to 1,000 characters; 6,000,004 bytes in all]")


async def test_written_files_come_back_including_a_pillow_png() -> None:
    image = io.BytesIO()
    Image.new("RGB", (64, 48), (200, 30, 30)).save(image, "PNG")
    inputs = [SandboxFile("photo.png", image.getvalue()), SandboxFile("keep.txt", b"same")]
    inputs.append(SandboxFile("edit.txt", b"old"))
    code = """
import os
from PIL import Image
Image.open("photo.png").convert("L").resize((32, 24)).save("gray.png")
os.makedirs("out")
open("out/notes.txt", "w").write("two files")
open("edit.txt", "w").write("new")
os.symlink("/etc/hostname", "link")
os.mkdir(".cache")
open(".cache/junk", "w").write("hidden")
"""
    result = await run(code, inputs)
    assert result.exit_code == 0, result.stderr
    files = {f.name: f.data for f in result.files}
    assert sorted(files) == ["edit.txt", "gray.png", "out/notes.txt"]
    assert files["edit.txt"] == b"new" and files["out/notes.txt"] == b"two files"
    gray = Image.open(io.BytesIO(files["gray.png"]))
    assert (gray.format, gray.mode, gray.size) == ("PNG", "L", (32, 24))


async def test_returned_files_are_capped() -> None:
    code = "for i in range(3): open(f'f{i}.bin', 'wb').write(bytes(600_000))"
    result = await run(code, limits=SandboxLimits(file_mb=1))
    assert [f.name for f in result.files] == ["f0.bin"]
    assert "files not returned (over 100 files or 1 MB): f1.bin, f2.bin" in result.stderr


async def test_bad_input_names_are_refused() -> None:
    for name in ("../escape", "a/b", "", ".main.py"):
        with pytest.raises(ValueError):
            await run("pass", [SandboxFile(name, b"")])


async def test_cancelling_kills_everything_at_once(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    code = "import subprocess\nfor _ in range(3): subprocess.Popen(['sleep', '600'])\nwhile True: pass"
    before = ours()
    task = asyncio.create_task(run(code, limits=SandboxLimits(wall_seconds=30)))
    tree = await wait_for_tree(lambda pids: sum(cmdline(p).startswith("sleep") for p in pids) == 3)
    tree = [pid for pid in tree if pid not in before]
    assert [p.name for p in tmp_path.iterdir()][0].startswith("chat-agent-sandbox-")
    await cancel_within(task, 0.5)
    assert len(tree) >= 5 and [pid for pid in tree if alive(pid)] == []  # bwrap, its PID 1, python, 3 sleeps
    assert ours() == before
    assert list(tmp_path.iterdir()) == []


async def test_another_interpreter_gets_its_own_installation_bound() -> None:
    base = os.path.realpath(sys.executable)  # a venv's interpreter, run without the venv
    result = await run("import sys; print(sys.prefix)", python=base)
    assert result.exit_code == 0 and result.stdout == f"{sys.base_prefix}\n", result.stderr


async def test_unsandboxed_keeps_limits_env_and_temp_dir(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHAT_AGENT_TEST_SECRET", SECRET)
    code = "import os\nprint(os.environ.get('CHAT_AGENT_TEST_SECRET'))\nopen('out.txt', 'w').write(os.getcwd())\n"
    code += "bytearray(400 << 20)"
    result = await run(code, unsandboxed=True)
    assert result.stdout == "None\n" and "MemoryError" in result.stderr
    [out] = result.files
    assert "chat-agent-sandbox-" in out.data.decode() and not os.path.exists(out.data.decode())


def _serve_one_run(code: str, wall_seconds: float) -> None:
    asyncio.run(run_python(code, [], limits=SandboxLimits(wall_seconds=wall_seconds)))


def test_the_sandbox_ends_itself_at_its_limit_when_its_server_cannot() -> None:
    """The second layer: a server that hangs (stopped here, so no parent-death signal comes
    either) leaves the sandbox to end itself, escaped sessions included."""
    marker = new_marker()
    code = f"import subprocess, time\nsubprocess.Popen(['sleep', '{marker}'], start_new_session=True)\ntime.sleep(600)"
    server = multiprocessing.get_context("fork").Process(target=_serve_one_run, args=(code, 1.0), daemon=True)
    server.start()
    tree: list[int] = []
    try:
        assert poll(lambda: bool(marked(marker)), 10), "the sandbox did not start"
        os.kill(server.pid, signal.SIGSTOP)
        started = time.monotonic()
        tree = descendants(server.pid) + marked(marker)
        assert len(tree) >= 4  # bwrap, its PID 1 (timeout), python, sleep
        assert poll(lambda: not any(alive(pid) for pid in tree), 1.0 + SELF_KILL_GRACE + 2)
        assert time.monotonic() - started < 1.0 + SELF_KILL_GRACE + pace.scaled(1.5)
        assert server.is_alive()  # the server did not do it: it was stopped all along
    finally:
        sigkill_all([*tree, server.pid])
        server.join(5)

"""A sandbox process's life: tied to the server's, a wall-clock limit, capped output, and a
kill that leaves nothing behind.

`sandbox.run_python` starts bwrap (unsandboxed, prlimit) through `launched`, in a session of
its own. Killing bwrap's child, the sandbox's PID 1, ends everything in the sandbox's PID
namespace; killing the session's process group covers the unsandboxed run.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

LAUNCHER = str(Path(__file__).with_name("launch.py"))


def launched(argv: list[str]) -> list[str]:
    """`argv` started through `launch.py`, so that it is SIGKILLed when this process dies.
    The signal follows the thread that forks it: start it from the event loop's thread (or
    another that lives as long as the process), never from a short-lived worker thread."""
    return [sys.executable, "-I", "-S", "-B", LAUNCHER, str(os.getpid()), *argv]


async def supervise(
    proc: asyncio.subprocess.Process, wall_seconds: float, output_chars: int
) -> tuple[int | None, bool, str, str]:
    """(exit code, timed out, stdout, stderr) once `proc` ends or `wall_seconds` pass: the
    exit code is None on a timeout and 128+N for signal N, each output capped at `output_chars`."""
    assert proc.stdout is not None and proc.stderr is not None
    readers = [asyncio.create_task(_read_capped(pipe, output_chars)) for pipe in (proc.stdout, proc.stderr)]
    try:
        try:
            async with asyncio.timeout(wall_seconds):
                await proc.wait()
        except TimeoutError:
            pass
        timed_out = proc.returncode is None
        await kill_sandbox(proc)  # stragglers still holding the pipes (unsandboxed: its process group)
        stdout, stderr = [await reader for reader in readers]
    finally:
        for reader in readers:
            reader.cancel()
    code = proc.returncode
    return (None if timed_out else 128 - code if code < 0 else code), timed_out, stdout, stderr


async def _read_capped(stream: asyncio.StreamReader, limit: int) -> str:
    """Reads to the end (so the writer never blocks) and keeps the first `limit` characters."""
    kept, total = bytearray(), 0
    while chunk := await stream.read(1 << 16):
        total += len(chunk)
        if len(kept) < 4 * limit:  # 4 bytes hold any UTF-8 character
            kept += chunk[: 4 * limit - len(kept)]
    text = kept.decode(errors="replace")
    if len(text) > limit or total > len(kept):
        text = f"{text[:limit]}\n[output truncated to {limit:,} characters; {total:,} bytes in all]\n"
    return text


async def kill_sandbox(proc: asyncio.subprocess.Process) -> None:
    """SIGKILLs bwrap's child (the sandbox's PID 1, whose death kills everything in its PID
    namespace) and bwrap's process group, reaps bwrap, and waits until that child is gone."""
    inner = _children(proc.pid) if proc.returncode is None else []
    for pid in inner:
        _sigkill(os.kill, pid)
    _sigkill(os.killpg, proc.pid)
    await proc.wait()
    for _ in range(200):  # the kernel empties the namespace within milliseconds
        if not any(_alive(pid) for pid in inner):
            return
        await asyncio.sleep(0.005)


def _sigkill(kill, pid: int) -> None:
    try:
        kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and (fields := _stat(int(entry.name))) and int(fields[1]) == pid:
            found.append(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    fields = _stat(pid)
    return fields is not None and fields[0] not in ("Z", "X")


def _stat(pid: int) -> list[str] | None:
    """State, ppid, ... from /proc/PID/stat (after the parenthesised command name)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None

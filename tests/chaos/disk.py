"""A tiny filesystem that a test fills up: a tmpfs mounted for the test (it runs as root, as
CI does; elsewhere the test skips and says why, and fails under CHAT_AGENT_REQUIRE_SERVICES=1).
"""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

REQUIRED = os.environ.get("CHAT_AGENT_REQUIRE_SERVICES") == "1"


@contextmanager
def tiny_disk(where: Path, size: str) -> Iterator[Path]:
    where.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        reason = f"cannot mount a tmpfs here (needs root): {mounted.stderr.strip() or mounted.returncode}"
        if REQUIRED:
            pytest.fail(reason)
        pytest.skip(reason)
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def fill(disk: Path) -> Path:
    """Writes a file until the disk has no byte left; returns it (unlink it to free the space)."""
    filler = disk / "filler"
    with open(filler, "wb", buffering=0) as out:
        for size in (1 << 16, 1 << 12, 1):
            try:
                while True:
                    out.write(b"\0" * size)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
    return filler

"""What a sandboxed run hands back (inside.py): a tar on a pipe, its first member a manifest.
Read to the end so the sandbox never blocks on a full pipe, and kept only up to a bound, so a
program that gets hold of the pipe cannot make the server hold more than the quota's worth."""

from __future__ import annotations

import io
import json
import os
import tarfile
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

MANIFEST = ".manifest.json"


@dataclass(slots=True)
class Report:
    manifest: dict[str, Any] = field(default_factory=dict)
    files: list[tuple[str, bytes]] = field(default_factory=list)  # (name, data)
    skipped: list[str] = field(default_factory=list)


def drain(fd: int, keep: int) -> bytes:
    """Reads `fd` to its end (then closes it), keeping the first `keep` bytes."""
    kept = bytearray()
    try:
        while chunk := os.read(fd, 1 << 16):
            if len(kept) < keep:
                kept += chunk[: keep - len(kept)]
    finally:
        os.close(fd)
    return bytes(kept)


def unpack(data: bytes) -> Report:
    """The manifest and the files, as far as the tar is whole (a run killed at its limit may
    have written half of it, or nothing)."""
    report = Report()
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r|") as tar:
            for member in tar:
                if not member.isfile() or not _plain(member.name):
                    continue
                extracted = tar.extractfile(member)
                content = extracted.read() if extracted is not None else b""
                if member.name == MANIFEST and not report.manifest:
                    report.manifest = json.loads(content)
                    report.skipped = [str(n) for n in report.manifest.get("skipped", [])]
                else:
                    report.files.append((member.name, content))
    except (tarfile.TarError, ValueError, EOFError):
        pass
    return report


def _plain(name: str) -> bool:
    path = PurePosixPath(name)
    return bool(name) and not path.is_absolute() and ".." not in path.parts and "\0" not in name

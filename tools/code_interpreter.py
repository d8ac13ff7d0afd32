"""`code_interpreter`: runs the model's Python on the conversation's images, in the sandbox.

The images go into the sandbox's work dir as `{id}{extension}`; what the code writes comes
back: images are checked, stored in the conversation (source "code") and shown to the model,
small text files are shown as text, anything else is only named. A failing program is a
normal result, not a tool error: the model needs its traceback to fix the code.

Each run's temp dir lives under the data dir's `sandbox/`; building the tool at start-up
removes the dirs that a killed server left there (and none that another live server sharing
the data dir is using: see `sandbox.scratch`).
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Annotated, Any

from langchain_core.tools import BaseTool, InjectedToolArg, tool
from pydantic import Field

from .sandbox import runner as sandbox
from .sandbox.scratch import remove_stale
from .sandbox.runner import SandboxFile, SandboxLimits, SandboxResult, name_list
from chat_agent.tooling import (ConversationFiles, FileError, ImageError, PreparedImage, Settings, StoredFile, ToolContext,
                                ToolUnavailable, image_block, image_format, prepare_image)

log = logging.getLogger(__name__)

NAME = "code_interpreter"
SCRATCH = "sandbox"  # under the data dir: the runs' temp dirs
DEFAULT_IMAGES = 10  # without image_ids: the conversation's newest images, at most this many
MAX_INPUTS = 20
MAX_NOTES = 20  # notes on files not kept, listed per run
MAX_IMAGES = 10  # images stored and shown per run; each costs the model ~1.6k tokens
TEXT_MAX_BYTES = 20 * 1024
TEXT_SUFFIXES = frozenset({".txt", ".csv", ".tsv", ".json", ".md"})
IMAGE_SUFFIXES = frozenset({".png", ".jpg", ".jpeg", ".gif", ".webp"})
OUTPUT_CHARS = 10_000  # per stream: stdout and stderr together stay within the registry's cap
UNSANDBOXED_HINT = "set CHAT_AGENT_CODE_UNSANDBOXED=1 to run code without a sandbox (dangerous)"

DESCRIPTION = """Run Python 3 code, for image processing, calculations, data work or charts.

The code runs as a script {where}.
Pillow is available; other packages may not be. Before the code runs, the conversation's
images are copied into {work} named by their id and extension, e.g. {example}
(by default the {default} newest; list `image_ids` to choose). Save output images (PNG, JPEG,
GIF or WEBP) into {work}: they are stored, shown to you with a new image id and shown to
the user. Text files (.txt, .csv, .json, .md) up to 20 KB written there are shown to you;
other files are not kept. All files written in one run share a disk quota. Print what you want to see; stdout and stderr come back (capped).
Each run starts from scratch (nothing carries over) and is stopped after a time limit."""
SANDBOXED = {
    "where": "in a fresh sandbox with no network, seeing only its working directory /mnt/data (the current one)",
    "work": "/mnt/data", "example": "/mnt/data/file_ab12….png",
}
UNSANDBOXED = {  # the same code runs, but in a temp dir of the host: relative paths only
    "where": "in a fresh temporary working directory (the current directory; use relative paths)",
    "work": "the current directory", "example": "file_ab12….png",
}


def build(settings: Settings, *, bwrap: str = "bwrap") -> BaseTool:
    """`bwrap` names the bubblewrap binary (tests point it at one that does not exist)."""
    scratch = _clean_scratch(settings)
    unsandboxed = settings.code_unsandboxed
    if unsandboxed:
        if shutil.which("prlimit") is None:
            raise ToolUnavailable("code interpreter unavailable: prlimit (util-linux) is not installed")
        _warn_unsandboxed()
    elif (reason := sandbox.probe(bwrap)) is not None:
        raise ToolUnavailable(f"{reason}; {UNSANDBOXED_HINT}")
    limits = SandboxLimits(
        wall_seconds=settings.code_timeout,
        cpu_seconds=max(1, math.ceil(settings.code_timeout)),  # the wall clock governs; CPU only bites threads
        memory_mb=settings.code_memory_mb,
        output_chars=OUTPUT_CHARS,
        disk_mb=settings.code_disk_mb,
    )
    description = DESCRIPTION.format(**(UNSANDBOXED if unsandboxed else SANDBOXED), default=DEFAULT_IMAGES)

    @tool(NAME, description=description, response_format="content_and_artifact")
    async def code_interpreter(
        code: Annotated[str, Field(min_length=1, description="The Python source to run.")],
        ctx: Annotated[ToolContext, InjectedToolArg],
        image_ids: Annotated[list[str] | None, Field(max_length=MAX_INPUTS, description=(
            "Ids of this conversation's images to copy into the working directory; "
            f"leave out for the {DEFAULT_IMAGES} newest, [] for none."))] = None,
    ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        files = ctx.files
        ctx.progress("Preparing files")
        inputs = await _inputs(files, image_ids)
        ctx.progress("Running code")
        result = await sandbox.run_python(code, inputs, limits=limits, unsandboxed=unsandboxed, bwrap=bwrap,
                                          scratch=scratch)
        outputs = await _outputs(ctx, files, result.files)
        return _content(result, limits, outputs), _output(result, outputs, files)

    code_interpreter.metadata = {"timeout": settings.code_timeout + 30}
    return code_interpreter


def _clean_scratch(settings: Settings) -> Path:
    """The runs' parent dir (absolute: bwrap starts in a run's dir), emptied of what a
    killed server left behind."""
    scratch = Path(os.path.abspath(settings.data_dir / SCRATCH))
    removed = remove_stale(scratch)
    if removed:
        log.info("removed %d sandbox dir(s) left by a server that was killed: %s", len(removed), ", ".join(removed))
    return scratch


def _warn_unsandboxed() -> None:
    log.warning(
        "\n%s\nCODE INTERPRETER RUNS WITHOUT A SANDBOX (CHAT_AGENT_CODE_UNSANDBOXED=1).\n"
        "Model-written Python will run with this server's privileges: it can read and change\n"
        "the server's files and data dir, reach the network and anything the server can reach.\n"
        "Only resource limits, a clean environment and a temp dir remain. Unset the variable\n"
        "and install bubblewrap to run code in the sandbox.\n%s",
        "!" * 88, "!" * 88,
    )


async def _inputs(files: ConversationFiles, image_ids: list[str] | None) -> list[SandboxFile]:
    images = await files.images()
    if image_ids is None:
        chosen = images[-DEFAULT_IMAGES:]
    else:
        by_id = {image.id: image for image in images}
        unknown = [i for i in image_ids if i not in by_id]
        if unknown:
            known = ", ".join(f"{i.id} ({i.filename})" for i in images) or "none"
            raise LookupError(f"Not an image of this conversation: {', '.join(unknown)}. Its images: {known}")
        chosen = [by_id[i] for i in dict.fromkeys(image_ids)]
    inputs = []
    for image in chosen:
        stored, data = await files.read(image.id)
        inputs.append(SandboxFile(f"{stored.id}{stored.extension}", data))
    return inputs


@dataclass(slots=True)
class _Outputs:
    images: list[tuple[StoredFile, PreparedImage]] = field(default_factory=list)  # PreparedImage: for the model
    texts: list[tuple[str, str]] = field(default_factory=list)  # (name, content)
    others: list[tuple[str, int]] = field(default_factory=list)  # (name, size): named, not kept
    notes: list[str] = field(default_factory=list)  # why a file was not kept


async def _outputs(ctx: ToolContext, files: ConversationFiles, written: list[SandboxFile]) -> _Outputs:
    out = _Outputs()
    images = {f.name for f in written if image_format(f.data) or _suffix(f.name) in IMAGE_SUFFIXES}
    if images:
        ctx.progress(f"Storing {len(images)} image{'' if len(images) == 1 else 's'}")
    for file in written:
        if file.name in images:
            await _store_image(files, file, out)
        elif (text := _small_text(file)) is not None:
            out.texts.append((file.name, text))
        else:
            out.others.append((file.name, len(file.data)))
    return out


async def _store_image(files: ConversationFiles, file: SandboxFile, out: _Outputs) -> None:
    if len(out.images) == MAX_IMAGES:
        out.notes.append(f"{name_list([file.name])}: not kept (over {MAX_IMAGES} images in one run)")
        return
    try:
        prepared = await asyncio.to_thread(prepare_image, file.data)
        stored = await files.save(file.data, PurePosixPath(file.name).name, source="code")
    except ImageError as exc:
        out.notes.append(f"{name_list([file.name])}: not kept ({exc})")
        return
    except FileError as exc:
        out.notes.append(f"{name_list([file.name])}: not kept ({exc.message})")
        return
    out.images.append((stored, prepared))


def _small_text(file: SandboxFile) -> str | None:
    if _suffix(file.name) not in TEXT_SUFFIXES or len(file.data) > TEXT_MAX_BYTES:
        return None
    try:
        return file.data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _suffix(name: str) -> str:
    return PurePosixPath(name).suffix.lower()


def _content(result: SandboxResult, limits: SandboxLimits, out: _Outputs) -> list[dict[str, Any]]:
    parts = [_status(result, limits)]
    for label, text in (("stdout", result.stdout), ("stderr", result.stderr)):
        if text:
            parts.append(f"--- {label} ---\n{text.rstrip()}")
    if not (result.stdout or result.stderr):
        parts.append("(the code printed nothing)")
    parts += [f"--- file {name} ---\n{text.rstrip()}" for name, text in out.texts]
    if out.others:
        parts.append("Other files written (not kept): " + name_list([f"{n} ({s:,} bytes)" for n, s in out.others]))
    parts += [f"Note: {note}" for note in out.notes[:MAX_NOTES]]
    if len(out.notes) > MAX_NOTES:
        parts.append(f"Note: {len(out.notes) - MAX_NOTES} more files not kept.")
    if out.images:
        parts.append(f"{len(out.images)} image{'' if len(out.images) == 1 else 's'} stored, shown below.")
    blocks: list[dict[str, Any]] = [{"type": "text", "text": "\n\n".join(parts)}]
    for stored, prepared in out.images:
        blocks += [{"type": "text", "text": stored.label}, image_block(prepared)]
    return blocks


def _status(result: SandboxResult, limits: SandboxLimits) -> str:
    if result.timed_out:
        return f"Timed out: the code ran past the {limits.wall_seconds:g} s time limit and was killed."
    if result.exit_code == 0:
        return "Exit code 0."
    return f"Exit code {result.exit_code}: the code failed (see stderr)."


def _output(result: SandboxResult, out: _Outputs, files: ConversationFiles) -> dict[str, Any]:
    return {
        "stdout": result.stdout,
        "stderr": result.stderr,
        "exitCode": result.exit_code,
        "timedOut": result.timed_out,
        "files": [
            {"imageId": stored.id, "url": files.url(stored), "name": stored.filename,
             "width": stored.width or prepared.width, "height": stored.height or prepared.height,
             "size": stored.size, "mediaType": stored.media_type}
            for stored, prepared in out.images
        ],
    }

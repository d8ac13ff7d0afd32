"""Run model-written Python in a bubblewrap sandbox, on a copy of the conversation's files.

    reason = probe()                     # None: the sandbox works here; else why not
    result = await run_python(code, [SandboxFile("in.png", data)])
    result.stdout, result.files          # what it printed; the files it wrote or changed

The code and the input files go into a fresh host temp dir, bound read-only at INPUTS; the
code's work dir WORK (also the cwd and HOME) is a tmpfs of `disk_mb` inside the sandbox, so
all the files of a run together never exceed that quota and never touch the host's disk.
`inside.py` copies the inputs in, runs the code and hands back what it wrote as a tar on a
pipe; /usr (with the /bin and /lib links), /etc/ld.so.cache, the Python
installation and its site-packages are bound read-only, and nothing else of the host: not
the server's home, data dir, environment or network. The sandbox has its own network
(only its own loopback), PID, IPC, UTS and cgroup namespaces and an environment of PATH, HOME, LANG
and PYTHONDONTWRITEBYTECODE only. /tmp and /dev/shm are tmpfs of `file_mb` each; the rest
of its tree is read-only. Cancelling `run_python` SIGKILLs the sandbox and removes the temp
dir at once (waiting and killing: `process`).

A sandbox never outlives the server by more than its own time limit, however the server dies:
- bwrap is started through `process.launched`, which makes the kernel SIGKILL it when the
  server dies; bwrap's `--die-with-parent` passes that on to the sandbox's PID 1, whose death
  kills every process in the sandbox's PID namespace.
- PID 1 (`--as-pid-1`) is coreutils `timeout`, which kills the code and exits at the limit
  (plus `SELF_KILL_GRACE`, so that the server's own kill, which reports the time-out, comes
  first), also if every parent is gone and no signal ever came (a server killed before bwrap
  set its own). As root, PID 1 stays root, for bwrap, having dropped its capabilities, can
  send the parent-death signal only to a process of its own uid; it gets CAP_KILL to kill
  the code's uid, which can signal none of root's processes. Unsandboxed, only the first
  layer holds: the code dies with the server, processes it started may not.
- the temp dir comes from `scratch.scratch_dir`: locked while in use, so that the next
  start-up finds a dead server's dirs (`scratch.remove_stale`) and no live one's.

Limits are set by `prlimit` inside the sandbox, so they bind the code but not bwrap:
RLIMIT_CPU, RLIMIT_AS, RLIMIT_FSIZE and RLIMIT_NPROC all survive into the program. The
kernel never applies RLIMIT_NPROC to uid 0, so when the server runs as root the sandbox
skips the user namespace and `setpriv` drops the code to a uid of its own (so a fork bomb
in one run cannot starve another); otherwise bwrap maps the server's uid in a new user
namespace, whose process count starts at zero. Not capped: the number of files written to
the work dir (each is capped by RLIMIT_FSIZE, all of them only by the time limits).
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .outputs import drain, unpack
from .process import kill_sandbox, launched, supervise
from .scratch import restore_access, scratch_dir

WORK = "/mnt/data"  # where the code sees its files; the path code interpreters conventionally use
INPUTS = "/mnt/.inputs"  # the host's input dir, read-only: inside.py copies it into WORK
INSIDE = (Path(__file__).with_name("inside.py")).read_text(encoding="utf-8")
COLLECT_SECONDS = 10.0  # past the wall-clock limit, for inside.py to hand back the files
CODE_NAME = ".main.py"  # hidden, so never returned as an output
RUN_UIDS = range(1_000_000_000, 2_000_000_000)  # as root, each run's own uid: its own RLIMIT_NPROC count
MAX_FILES = 100  # files returned; their total size is capped by `file_mb`
NOTE_NAMES, NOTE_NAME_CHARS = 20, 120  # file names listed in a note, and characters of each
SELF_KILL_GRACE = 1.0  # seconds past `wall_seconds` before the sandbox ends itself
_SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_MB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class SandboxLimits:
    wall_seconds: float = 30.0
    cpu_seconds: int = 20
    memory_mb: int = 512  # address space, per process
    file_mb: int = 50  # per file written; also the size of /tmp and of the files returned
    processes: int = 32
    output_chars: int = 20_000  # stdout and stderr are each capped (with a note saying so)
    disk_mb: int = 100  # the work dir's tmpfs: everything one run writes there together


@dataclass(frozen=True, slots=True)
class SandboxFile:
    name: str  # relative to the work dir; inputs are plain names, outputs may be "out/a.png"
    data: bytes


@dataclass(frozen=True, slots=True)
class SandboxResult:
    exit_code: int | None  # None when the wall-clock limit killed it; 128+N for signal N
    stdout: str
    stderr: str
    timed_out: bool
    files: list[SandboxFile]  # files the code wrote into its work dir (not inputs unchanged)


def probe(bwrap: str = "bwrap") -> str | None:
    """None if the sandbox works here (it runs `true` in exactly the sandbox `run_python`
    builds), else the reason, fit for `session.tools`."""
    try:
        tools = _tools(bwrap)
    except FileNotFoundError as exc:
        return f"code sandbox unavailable: {exc}"
    with tempfile.TemporaryDirectory(prefix="chat-agent-probe-") as work:
        uid = _own(Path(work))
        argv = launched(_sandbox_argv(tools, Path(work), uid, [], SandboxLimits(), ["true"]))
        try:
            done = subprocess.run(argv, capture_output=True, timeout=10, env=_env("/usr/bin", WORK))
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"code sandbox unavailable: bubblewrap failed to run ({exc})"
    if done.returncode != 0:
        detail = done.stderr.decode(errors="replace").strip() or f"exit code {done.returncode}"
        return f"code sandbox unavailable: bubblewrap cannot create its sandbox here ({detail})"
    return None


async def run_python(
    code: str,
    files: list[SandboxFile],
    *,
    limits: SandboxLimits = SandboxLimits(),
    python: str = sys.executable,
    unsandboxed: bool = False,
    bwrap: str = "bwrap",
    scratch: Path | None = None,
) -> SandboxResult:
    """Runs `code` with `python -I` on copies of `files`, in a temp dir under `scratch`
    (default: the system's temp dir). `unsandboxed` runs it without bwrap (rlimits, a clean
    environment, the temp dir and the death with the server remain): the caller warns loudly."""
    exe = shutil.which(python)
    if exe is None:
        raise FileNotFoundError(f"python not found: {python}")
    tools = _tools(bwrap, unsandboxed)
    with scratch_dir(scratch) as work:
        inputs = _write_inputs(work, code, files)
        if not unsandboxed:
            return await _run_sandboxed(tools, work, exe, limits)
        argv, env = await _command(tools, work, exe, limits, unsandboxed)
        proc = await asyncio.create_subprocess_exec(
            *launched(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            cwd=work, env=env, start_new_session=True,
        )
        try:
            exit_code, timed_out, stdout, stderr = await supervise(proc, limits.wall_seconds, limits.output_chars)
        finally:
            if proc.returncode is None:  # cancelled: kill it at once, nothing of it outlives this call
                await kill_sandbox(proc)
        outputs, skipped = _collect(work, inputs, limits)
        stderr += _notes(exit_code, timed_out, limits, skipped)
        return SandboxResult(exit_code, stdout, stderr, timed_out, outputs)


async def _run_sandboxed(tools: dict[str, str], work: Path, exe: str, limits: SandboxLimits) -> SandboxResult:
    """The code in bwrap, its files coming back on a pipe as a tar (see inside.py)."""
    uid = _own(work)
    read_end, write_end = os.pipe()
    try:
        spec = {"inputs": INPUTS, "work": WORK, "code": f"{WORK}/{CODE_NAME}", "fd": write_end,
                "wall": limits.wall_seconds, "max_files": MAX_FILES, "max_bytes": limits.file_mb * _MB}
        program = [exe, "-I", "-B", "-c", INSIDE, json.dumps(spec)]
        argv = _sandbox_argv(tools, work, uid, await _python_roots(exe), limits, program)
        proc = await asyncio.create_subprocess_exec(
            *launched(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            cwd=work, env=_env("/usr/bin", WORK), start_new_session=True, pass_fds=(write_end,),
        )
    except BaseException:
        os.close(read_end)
        raise
    finally:
        os.close(write_end)
    reading = asyncio.ensure_future(asyncio.to_thread(drain, read_end, limits.file_mb * _MB + (MAX_FILES + 2) * 2048))
    try:
        exit_code, timed_out, stdout, stderr = await supervise(proc, limits.wall_seconds + COLLECT_SECONDS,
                                                               limits.output_chars)
    finally:
        if proc.returncode is None:  # cancelled: kill it at once, nothing of it outlives this call
            await kill_sandbox(proc)
    report = unpack(await reading)
    if report.manifest:
        exit_code, timed_out = report.manifest.get("exitCode"), timed_out or bool(report.manifest.get("timedOut"))
    stderr += _notes(exit_code, timed_out, limits, report.skipped, full=bool(report.manifest.get("full")))
    return SandboxResult(exit_code, stdout, stderr, timed_out, [SandboxFile(n, d) for n, d in report.files])


async def _command(
    tools: dict[str, str], work: Path, exe: str, limits: SandboxLimits, unsandboxed: bool
) -> tuple[list[str], dict[str, str]]:
    """The command line and the environment bwrap (or, unsandboxed, prlimit) starts with.
    Unbuffered (-u): what the code printed before a time limit killed it still comes back."""
    if unsandboxed:
        program = [exe, "-I", "-B", "-u", str(work / CODE_NAME)]
        return [tools["prlimit"], *_rlimits(limits), "--", *program], _env(os.path.dirname(exe), str(work))
    uid = _own(work)
    program = [exe, "-I", "-B", "-u", f"{WORK}/{CODE_NAME}"]
    return _sandbox_argv(tools, work, uid, await _python_roots(exe), limits, program), _env("/usr/bin", WORK)


def _tools(bwrap: str, unsandboxed: bool = False) -> dict[str, str]:
    names = {"prlimit": "prlimit"}
    if not unsandboxed:
        names |= {"bwrap": bwrap, "setpriv": "setpriv", "timeout": "timeout"}
    found = {key: shutil.which(name) for key, name in names.items()}
    missing = [names[key] for key, path in found.items() if path is None]
    if missing:
        raise FileNotFoundError(f"not installed: {', '.join(missing)}")
    return found  # type: ignore[return-value]


def _env(bin_dir: str, home: str) -> dict[str, str]:
    path = ":".join(dict.fromkeys([bin_dir, "/usr/local/bin", "/usr/bin", "/bin"]))
    return {"PATH": path, "HOME": home, "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1"}


def _rlimits(limits: SandboxLimits) -> list[str]:
    return [
        f"--cpu={limits.cpu_seconds}:{limits.cpu_seconds + 1}",  # SIGXCPU, then SIGKILL a second later
        "--core=0",
        f"--as={limits.memory_mb * _MB}",
        f"--fsize={limits.file_mb * _MB}",
        f"--nproc={limits.processes}",
    ]


def _as_root() -> bool:
    return os.geteuid() == 0


def _sandbox_argv(
    tools: dict[str, str], work: Path, uid: int, roots: list[str], limits: SandboxLimits, program: list[str]
) -> list[str]:
    argv = [tools["bwrap"], "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try"]
    argv += ["--die-with-parent", "--as-pid-1", "--new-session", "--cap-drop", "ALL"]
    drop: list[str] = []
    if _as_root():  # no user namespace: uid 0 would stay uid 0 outside, immune to RLIMIT_NPROC
        argv += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_KILL"]
        drop = [tools["setpriv"], f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--inh-caps=-all"]
    else:
        argv += ["--unshare-user", "--disable-userns"]
    argv += ["--clearenv", *(a for k, v in _env(os.path.dirname(program[0]), WORK).items() for a in ("--setenv", k, v))]
    for path in _SYSTEM:
        if os.path.islink(path):
            argv += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            argv += ["--ro-bind", path, path]
    argv += ["--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache"]
    argv += ["--proc", "/proc", "--dev", "/dev"]
    for scratch in ("/tmp", "/dev/shm"):  # bounded: a tmpfs is memory no rlimit counts
        argv += ["--perms", "1777", "--size", str(limits.file_mb * _MB), "--tmpfs", scratch]
    argv += _parent_dirs([*roots, WORK, INPUTS])
    argv += [a for root in roots for a in ("--ro-bind", os.path.realpath(root), root)]
    argv += ["--ro-bind", str(work), INPUTS]
    argv += ["--perms", "1777", "--size", str(limits.disk_mb * _MB), "--tmpfs", WORK, "--chdir", WORK]
    argv += ["--remount-ro", "/dev", "--remount-ro", "/"]  # bwrap's own tmpfs, unbounded, writable in a user namespace
    grace = limits.wall_seconds + COLLECT_SECONDS + SELF_KILL_GRACE
    deadline = [tools["timeout"], "--signal=KILL", f"{grace:.3f}"]
    return [*argv, "--", *deadline, *drop, tools["prlimit"], *_rlimits(limits), "--", *program]


def _parent_dirs(paths: list[str]) -> list[str]:
    """Makes the mount points' parents 0755 (bwrap would copy the host's, and the server's
    home is often 0700 while the code runs as another user when the server is root)."""
    made: dict[str, None] = {}
    for path in paths:
        if path != WORK and (_within(path, WORK) or _within(WORK, path)):
            raise RuntimeError(f"the Python installation {path} overlaps the sandbox's work dir {WORK}")
        made.update((str(parent), None) for parent in reversed(Path(path).parents[:-1]))
    return [a for parent in made for a in ("--perms", "0755", "--dir", parent)]


def _within(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent.rstrip("/") + "/")


async def _python_roots(exe: str) -> list[str]:
    """The prefixes `exe` runs from (its venv and its base installation), outside /usr."""
    if exe == sys.executable:
        return _outside_usr([sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix])
    query = "import sys; print(sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, sep='\\n')"
    proc = await asyncio.create_subprocess_exec(
        exe, "-I", "-c", query, stdout=subprocess.PIPE, env=_env("/usr/bin", "/"),
    )
    out, _ = await proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"{exe} failed to report its installation (exit code {proc.returncode})")
    return _outside_usr(out.decode().splitlines())


def _outside_usr(prefixes: list[str]) -> list[str]:
    roots = sorted({p for p in prefixes if p and not _within(p, "/usr")})
    return [r for r in roots if not any(r != other and _within(r, other) for other in roots)]


def _write_inputs(work: Path, code: str, files: list[SandboxFile]) -> dict[str, bytes]:
    inputs: dict[str, bytes] = {}
    for file in files:
        if file.name in ("", ".", "..", CODE_NAME) or "/" in file.name or "\0" in file.name:
            raise ValueError(f"bad input file name: {file.name!r}")
        if file.name in inputs:
            raise ValueError(f"duplicate input file name: {file.name!r}")
        inputs[file.name] = file.data
        (work / file.name).write_bytes(file.data)
    (work / CODE_NAME).write_text(code, encoding="utf-8")
    return inputs


def _own(work: Path) -> int:
    """As root, picks the uid the code runs as and hands it the work dir; group root may
    enter it (bwrap, having dropped its capabilities, changes into it), others may not."""
    if not _as_root():
        return os.getuid()
    uid = RUN_UIDS.start + secrets.randbelow(len(RUN_UIDS))
    for path in work.iterdir():
        os.chown(path, uid, uid)
    os.chown(work, uid, 0)
    os.chmod(work, 0o750)
    return uid


def _collect(work: Path, inputs: dict[str, bytes], limits: SandboxLimits) -> tuple[list[SandboxFile], list[str]]:
    """Regular files (never following links) outside hidden dirs, new or changed, in name
    order, up to MAX_FILES and `file_mb` in all; the names of those left out."""
    found, skipped, budget = [], [], limits.file_mb * _MB
    restore_access(work)
    for name in sorted(_walk(work)):
        data = _read_regular(work / name, limits.file_mb * _MB)
        if data is None or inputs.get(name) == data:
            continue
        if len(found) == MAX_FILES or len(data) > budget:
            skipped.append(name)
            continue
        budget -= len(data)
        found.append(SandboxFile(name, data))
    return found, skipped


def _walk(work: Path) -> list[str]:
    names = []
    for top, dirs, files in os.walk(work):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        names += [os.path.relpath(os.path.join(top, f), work) for f in files if not f.startswith(".")]
    return names


def _read_regular(path: Path, limit: int) -> bytes | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as file:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return file.read(limit + 1)


def name_list(names: list[str], most: int = NOTE_NAMES) -> str:
    """Names for a note, bounded however many and however long they are (a program can write
    thousands of files with 255-character names, 15 directories deep)."""
    shown = [n if len(n) <= NOTE_NAME_CHARS else n[:NOTE_NAME_CHARS - 1] + "…" for n in names[:most]]
    more = f" and {len(names) - most:,} more" if len(names) > most else ""
    return ", ".join(shown) + more


def _notes(exit_code: int | None, timed_out: bool, limits: SandboxLimits, skipped: list[str],
           full: bool = False) -> str:
    notes = []
    if full:
        notes.append(f"the working directory's disk quota of {limits.disk_mb} MB is full: writes past it failed "
                     "with 'No space left on device'")
    if timed_out:
        notes.append(f"killed: the {limits.wall_seconds:g} s time limit was reached")
    elif exit_code is not None and exit_code > 128 and exit_code - 128 in signal.valid_signals():
        name = signal.Signals(exit_code - 128).name
        notes.append(f"killed by {name}" + (" (the CPU time limit)" if name == "SIGXCPU" else ""))
    if skipped:
        notes.append(f"files not returned (over {MAX_FILES} files or {limits.file_mb} MB): {name_list(skipped)}")
    return "".join(f"\n[sandbox: {note}]" for note in notes)

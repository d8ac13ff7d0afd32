"""Runs inside the sandbox, before and after the model's code (its source is passed to
`python -I -c`; standard library only).

The work dir the code sees is a tmpfs of the disk quota's size, inside the sandbox: nothing the
code writes reaches the host's disk, and it cannot write more than the quota. This program
copies the inputs in from a read-only bind of the host's input dir, runs the code under the
wall-clock limit, kills whatever the code left running, and streams the files the code wrote
(new or changed, regular, outside hidden dirs, in name order, up to `max_files` and
`max_bytes` in all) to the host as a tar on a pipe of its own, which the code's process never
inherits. The tar's first member, `.manifest.json`, says how the run went.

    python -I -c SOURCE SPEC_JSON      SPEC: {"inputs", "work", "code", "fd", "wall", "max_files", "max_bytes"}
"""

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tarfile
import time
from io import BytesIO

MANIFEST = ".manifest.json"
FULL_BELOW = 64 * 1024  # bytes left on the tmpfs under which it counts as full


def main(spec):
    fd = spec["fd"]
    os.set_inheritable(fd, False)
    work, inputs = spec["work"], {}
    for name in sorted(os.listdir(spec["inputs"])):
        source = os.path.join(spec["inputs"], name)
        shutil.copyfile(source, os.path.join(work, name))
        if not name.startswith("."):
            with open(source, "rb") as file:
                inputs[name] = file.read()
    started = time.monotonic()
    code = subprocess.Popen([sys.executable, "-I", "-B", "-u", spec["code"]], cwd=work, stdin=subprocess.DEVNULL,
                            close_fds=True)
    try:
        status, timed_out = code.wait(timeout=spec["wall"]), False
    except subprocess.TimeoutExpired:
        code.kill()
        status, timed_out = code.wait(), True
    elapsed = time.monotonic() - started
    try:
        os.kill(-1, signal.SIGKILL)  # whatever the code left behind, still writing: all but us and PID 1
    except ProcessLookupError:
        pass
    disk = os.statvfs(work)
    manifest = {"exitCode": None if timed_out else (128 - status if status < 0 else status),
                "timedOut": timed_out, "elapsed": elapsed, "full": disk.f_bavail * disk.f_frsize < FULL_BELOW}
    with os.fdopen(fd, "wb") as pipe, tarfile.open(fileobj=pipe, mode="w|") as tar:
        written, skipped = _collect(work, inputs, spec["max_files"], spec["max_bytes"])
        manifest["skipped"] = skipped
        _add(tar, MANIFEST, json.dumps(manifest).encode())
        for name, data in written:
            _add(tar, name, data)
    sys.exit(0)


def _collect(work, inputs, max_files, max_bytes):
    found, skipped, budget = [], [], max_bytes
    names = []
    for top, dirs, files in os.walk(work):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        names += [os.path.relpath(os.path.join(top, f), work) for f in files if not f.startswith(".")]
    for name in sorted(names):
        data = _read_regular(os.path.join(work, name), max_bytes)
        if data is None or inputs.get(name) == data:
            continue
        if len(found) == max_files or len(data) > budget:
            skipped.append(name)
            continue
        budget -= len(data)
        found.append((name, data))
    return found, skipped


def _read_regular(path, limit):
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as file:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return file.read(limit + 1)


def _add(tar, name, data):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = 0
    tar.addfile(info, BytesIO(data))


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))

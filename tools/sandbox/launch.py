"""Execs a command that the kernel kills when its parent dies, however the parent dies.

    python -I -S launch.py PARENT_PID COMMAND [ARG...]

Run by the server in place of bwrap (see `process.launched`). PR_SET_PDEATHSIG set here
survives the execve of any program that is not set-uid, so the command itself receives
SIGKILL the moment the server (the thread that forked it) ends, even by SIGKILL. bwrap's
own `--die-with-parent` sets the same signal, but only after its set-up: this closes that
window. It cannot be set between fork and exec in the server (`preexec_fn` is unsafe in a
threaded process), hence this separate step.

Standard library only, and nothing imported that is not needed: it runs before every sandbox.
"""

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
ORPHANED = 125  # exit code when the parent was already gone: the command is not started


def main(argv: list[str]) -> None:
    if len(argv) < 3 or not argv[1].isdigit():
        sys.exit("usage: launch.py PARENT_PID COMMAND [ARG...]")
    parent, command = int(argv[1]), argv[2:]
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        error = ctypes.get_errno()
        sys.exit(f"launch.py: prctl(PR_SET_PDEATHSIG): {os.strerror(error)}")
    # A parent that died before prctl sends no signal: this process has been handed to
    # another (init or a subreaper), and what it would start would belong to nobody.
    if os.getppid() != parent:
        print(f"launch.py: parent {parent} is gone; not starting {command[0]}", file=sys.stderr)
        sys.exit(ORPHANED)
    os.execv(command[0], command)


if __name__ == "__main__":
    main(sys.argv)

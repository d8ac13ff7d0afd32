"""A program on a pseudo-terminal, driven as a person at a keyboard would: type lines, press
Ctrl-C, wait for text to appear. The program sees a real terminal (isatty, a controlling
terminal whose Ctrl-C the line discipline turns into SIGINT), and it lives in a process
group of its own under tests/reaper.py, so a failed test leaves nothing running."""

from __future__ import annotations

import fcntl
import os
import pty
import select
import termios
from typing import Any

from tests import pace, reaper


def _take_terminal() -> None:
    """In the child, after setsid: the pty (its stdin) becomes its controlling terminal, so
    Ctrl-C typed into it reaches its process group as SIGINT."""
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


class Terminal:
    def __init__(self, argv: list[str], **popen: Any):
        self._master, slave = pty.openpty()
        try:
            self.proc = reaper.spawn(argv, stdin=slave, stdout=slave, stderr=slave, preexec_fn=_take_terminal,
                                     **popen)
        finally:
            os.close(slave)
        self.screen = ""  # everything written so far, "\r\n" read as "\n"
        self._seen = 0  # where the next `expect` starts looking

    def __enter__(self) -> Terminal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def type(self, text: str) -> None:
        os.write(self._master, text.encode())

    def line(self, text: str) -> None:
        self.type(text + "\r")

    def expect(self, text: str, timeout: float = 20) -> str:
        """Waits until `text` appears after what earlier calls matched; returns the screen
        from there up to the end of `text`."""
        deadline = pace.Deadline(timeout)
        while (at := self.screen.find(text, self._seen)) < 0:
            assert not deadline.expired(), f"{text!r} did not appear; the terminal shows:\n{self.screen[-2000:]}"
            if not self._read(0.1):
                assert self.proc.poll() is None, f"exited {self.proc.returncode} before {text!r}:\n{self.screen}"
        start, self._seen = self._seen, at + len(text)
        return self.screen[start:self._seen]

    def wait(self, timeout: float = 20) -> int:
        """The program's exit status, once it has exited (what it wrote meanwhile is read)."""
        deadline = pace.Deadline(timeout)
        while self.proc.poll() is None:
            assert not deadline.expired(), f"still running; the terminal shows:\n{self.screen[-2000:]}"
            self._read(0.1)
        while self._read(0):
            pass
        return self.proc.returncode

    def close(self) -> None:
        reaper.end(self.proc)
        os.close(self._master)

    def _read(self, timeout: float) -> bool:
        if not select.select([self._master], [], [], timeout)[0]:
            return False
        try:
            data = os.read(self._master, 65536)
        except OSError:  # EIO: the program closed the terminal (it exited)
            return False
        self.screen += data.decode(errors="replace").replace("\r\n", "\n")
        return bool(data)


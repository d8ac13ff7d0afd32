"""A client kept for the event loop that uses it.

An httpx.AsyncClient (and an SDK client wrapping one) belongs to the event loop it first
ran on. Keeping one for a tool's life keeps its TLS connection warm; a call from another
loop (tests run several) gets a new one instead of connections that are not its own.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class PerLoop(Generic[T]):
    def __init__(self, make: Callable[[], T]) -> None:
        self._make = make
        # Made now, not in the middle of a turn: making one loads the CA bundle (~90 ms).
        self._client = make()
        self._loop: asyncio.AbstractEventLoop | None = None  # None: not used yet

    def get(self) -> T:
        """The client for the running loop."""
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            if self._loop is not None:
                self._client = self._make()
            self._loop = loop
        return self._client

    def used_here(self) -> T | None:
        """The client if the running loop has used it (so may close it), else None."""
        return self._client if self._loop is asyncio.get_running_loop() else None

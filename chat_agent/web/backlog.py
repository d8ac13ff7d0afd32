"""What frames queued for clients that read slower than their conversation writes may cost.

Every connection queues its frames and writes them in its own task, so a slow socket never
holds up a turn; the price is memory. Backlogs bounds it per connection and across all of
them: past either limit, the connection furthest behind is dropped (it reconnects and
`resume`s from the event log), and everyone else carries on.
"""

from __future__ import annotations

import logging
from typing import Protocol

log = logging.getLogger(__name__)


class Behind(Protocol):
    """A connection that queues frames."""

    def drop_behind(self, queued: int) -> None:
        """Discard the queue and close the socket (1013); `queued` bytes were waiting."""
        ...


class Backlogs:
    def __init__(self, total_limit: int, connection_limit: int):
        if total_limit <= 0 or connection_limit <= 0:
            raise ValueError("backlog limits must be positive")
        self.total_limit = total_limit
        self.connection_limit = connection_limit
        self._queued: dict[Behind, int] = {}
        self.total = 0

    def queued(self, connection: Behind) -> int:
        return self._queued.get(connection, 0)

    def add(self, connection: Behind, size: int) -> None:
        """`size` more bytes wait for `connection`; drops whoever must go to stay in bounds."""
        queued = self._queued.get(connection, 0) + size
        self._queued[connection] = queued
        self.total += size
        if queued > self.connection_limit:
            self._drop(connection, "its own limit")
        while self.total > self.total_limit and self._queued:
            # The largest backlog is the slowest reader: dropping it frees the most and spares
            # the clients that keep up.
            self._drop(max(self._queued, key=self._queued.__getitem__), "the server's total")

    def sent(self, connection: Behind, size: int) -> None:
        if connection in self._queued:
            self._queued[connection] -= size
            self.total -= size

    def forget(self, connection: Behind) -> int:
        """The connection queues nothing any more (it closed, or was dropped)."""
        queued = self._queued.pop(connection, 0)
        self.total -= queued
        return queued

    def _drop(self, connection: Behind, limit: str) -> None:
        queued = self.forget(connection)
        log.warning("dropping a client %d bytes behind (over %s; %d bytes queued in all)",
                    queued, limit, self.total + queued)
        connection.drop_behind(queued)

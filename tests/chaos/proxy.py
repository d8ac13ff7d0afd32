"""A TCP proxy between the server instances and PostgreSQL that can cut the database off, as a
network fault or a database restart would: the instances are pointed at it through
CHAT_AGENT_DATABASE_URL, as a user would point them at a pooler.

It runs an event loop of its own on a thread, so that what the test's loop does (or a
blocking call in a test) never slows the database down for the instances.

    with PgProxy() as proxy:
        url = proxy.url(pg_url)          # the same database and schema, through the proxy
        proxy.cut()                      # every open connection dropped (RST), new ones held
        proxy.restore()                  # held ones closed, new ones let through again
        proxy.lose_answer(b"COMMIT")     # the next such request is carried out, its
                                                  # answer lost and its connection reset
"""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
from urllib.parse import urlsplit, urlunsplit

from tests import pg


class PgProxy:
    def __init__(self, host: str = pg.HOST, port: int = pg.PORT):
        self._target = (host, port)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="pg-proxy", daemon=True)
        self._server: asyncio.base_events.Server | None = None
        self._pairs: set[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = set()
        self._held: set[asyncio.StreamWriter] = set()  # accepted while cut: never answered
        self._cut: str | None = None  # None, "blackhole" (new connections hang) or "refuse" (RST at once)
        self.port = 0
        self.connections = 0  # accepted so far, for a test's sanity checks
        self._lose: bytes | None = None  # see `lose_answer`
        self._late: float | None = None  # see `late_commit`
        self.answers_lost = 0

    # ---- life --------------------------------------------------------------------------------

    def __enter__(self) -> PgProxy:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self._call(self._close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def url(self, database_url: str) -> str:
        """`database_url` (a test schema's) with the proxy as its host and port."""
        parts = urlsplit(database_url)
        netloc = parts.netloc.rsplit("@", 1)
        host = f"127.0.0.1:{self.port}"
        return urlunsplit(parts._replace(netloc=f"{netloc[0]}@{host}" if len(netloc) == 2 else host))

    # ---- faults ------------------------------------------------------------------------------

    def cut(self, new: str = "blackhole") -> int:
        """Drops every open connection (a reset, as a dead peer's kernel sends) and, until
        `restore`, holds new ones without an answer ("blackhole": a connect that hangs) or
        resets them at once ("refuse"). Returns how many connections were dropped."""
        assert new in ("blackhole", "refuse")
        return self._call(self._do_cut(new))

    def restore(self) -> None:
        """Lets connections through again; the ones held meanwhile are reset (their clients
        connect again)."""
        self._call(self._do_restore())

    def lose_answer(self, marker: bytes) -> None:
        """The next request whose bytes hold `marker` reaches the database and is carried out
        (committed, for a transaction), but its answer never reaches the client: the
        connection is reset as the answer arrives, as when a network fails at that moment."""
        self._lose = marker

    def late_commit(self, hold: float) -> None:
        """The next transaction's COMMIT is held back `hold` seconds on its way to the database,
        while its client sees the connection reset at once: the transaction is still open
        (its rows locked) when the client tries again, and commits after that."""
        self._late = hold

    @property
    def is_cut(self) -> bool:
        return self._cut is not None

    # ---- inside the proxy's loop --------------------------------------------------------------

    def _call(self, coro):  # type: ignore[no-untyped-def]
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)

    async def _start(self) -> None:
        self._server = await asyncio.start_server(self._accepted, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _close(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in [w for pair in self._pairs for w in pair] + list(self._held):
            _reset(writer)
        self._pairs.clear()
        self._held.clear()
        # Each connection's task ends once its sockets are reset.
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        if tasks:
            await asyncio.wait(tasks, timeout=5)

    async def _do_cut(self, new: str) -> int:
        self._cut = new
        dropped = len(self._pairs)
        for pair in list(self._pairs):
            for writer in pair:
                _reset(writer)
        self._pairs.clear()
        return dropped

    async def _do_restore(self) -> None:
        self._cut = None
        for writer in list(self._held):
            _reset(writer)
        self._held.clear()

    async def _accepted(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        if self._cut == "refuse":
            _reset(writer)
            return
        if self._cut == "blackhole":
            self._held.add(writer)
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self._target)
        except OSError:
            _reset(writer)
            return
        if self._cut is not None:  # cut while connecting
            _reset(up_writer)
            _reset(writer)
            return
        pair = (writer, up_writer)
        self._pairs.add(pair)
        doomed = asyncio.Event()  # this connection carries a request whose answer is to be lost
        try:
            await asyncio.gather(self._pump(reader, up_writer, doomed, up=True),
                                 self._pump(up_reader, writer, doomed, up=False))
        finally:
            self._pairs.discard(pair)
            for w in pair:
                if not w.is_closing():
                    w.close()


    def _reset_client(self, upstream: asyncio.StreamWriter) -> None:
        for client, up in self._pairs:
            if up is upstream:
                _reset(client)

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, doomed: asyncio.Event, *,
                    up: bool) -> None:
        try:
            while data := await reader.read(65536):
                if up and self._late is not None and (at := _message_with(data, b"COMMIT")) is not None:
                    hold, self._late = self._late, None
                    writer.write(data[:at])  # all but the COMMIT: the transaction's rows are in
                    await writer.drain()
                    doomed.set()
                    self._reset_client(writer)
                    await asyncio.sleep(hold)
                    writer.write(data[at:])
                    await writer.drain()
                    await asyncio.sleep(0.5)
                    return
                if up and self._lose is not None and self._lose in data:
                    self._lose = None
                    doomed.set()
                elif not up and doomed.is_set():
                    # The database answered: what was asked is done. The client never hears it.
                    await asyncio.sleep(0.2)
                    self.answers_lost += 1
                    _reset(writer)
                    return
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            if not writer.is_closing():
                try:
                    writer.write_eof()
                except (OSError, RuntimeError):
                    writer.close()


def _message_with(data: bytes, marker: bytes) -> int | None:
    """Where the first PostgreSQL protocol message (type byte, int32 length) holding `marker`
    starts in a chunk a client sent after its start-up; None when none does."""
    at = 0
    while at + 5 <= len(data):
        length = struct.unpack("!i", data[at + 1:at + 5])[0]
        if length < 4:
            return None
        if marker in data[at:at + 1 + length]:
            return at
        at += 1 + length
    return None


def _reset(writer: asyncio.StreamWriter) -> None:
    """Closes with a TCP reset, not a polite FIN: the peer's next read or write fails."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
    writer.transport.abort()

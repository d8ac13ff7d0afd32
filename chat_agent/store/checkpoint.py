"""WAL checkpoints off the commit path.

By default SQLite checkpoints inside whichever commit pushes the WAL past 1,000 pages: that
commit copies the WAL into the database file and fsyncs it, which on a busy disk takes
hundreds of ms to seconds, and every conversation's frames wait behind that one commit.
The store's own connection therefore never checkpoints (`wal_autocheckpoint = 0`); this
class runs PASSIVE checkpoints from a second connection on a thread of its own, every
`interval` seconds. A PASSIVE checkpoint never blocks writers: commits go on appending to
the WAL meanwhile, and SQLite starts the WAL over from its beginning once a checkpoint
has caught up, so the file stays bounded.

Under a steady stream of commits on a slow disk the WAL may never start over (a commit
always lands while a checkpoint fsyncs), and it would grow with everything written. Once
it holds more than `RESTART_FRAMES` pages, a RESTART checkpoint follows the PASSIVE one: writers
wait for it (on the store's write thread, never on the event loop: an inline commit that
finds the lock taken goes there), and the WAL starts over.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

log = logging.getLogger(__name__)

INTERVAL = 1.0  # seconds between checkpoints
RESTART_FRAMES = 1000  # SQLite's own auto-checkpoint threshold, in pages
NO_AUTO_CHECKPOINT = "PRAGMA wal_autocheckpoint = 0"


class WalCheckpointer:
    def __init__(self, path: Path, interval: float = INTERVAL):
        self._path = path
        self._interval = interval
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sqlite-checkpoint")
        self._db: sqlite3.Connection | None = None
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="sqlite-checkpoint")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await asyncio.get_running_loop().run_in_executor(self._thread, self._disconnect)
        self._thread.shutdown(wait=True)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self._interval)
            try:
                await loop.run_in_executor(self._thread, self._checkpoint)
            except sqlite3.Error as exc:  # a busy or failing disk: the next round tries again
                log.warning("WAL checkpoint failed: %s", exc)

    def _checkpoint(self) -> None:
        if self._db is None:
            # Autocommit, and a long busy timeout is harmless here: nothing waits on this thread.
            self._db = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False, timeout=30)
        _busy, frames, _done = self._db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()[0]
        if frames > RESTART_FRAMES:  # writers wait this once, and the WAL starts over
            self._db.execute("PRAGMA wal_checkpoint(RESTART)").fetchall()

    def _disconnect(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

"""Group commit: every state change goes through one ordered queue into the store.

Callers submit operations synchronously and go on; a single task applies everything that
queued up meanwhile in one transaction, then runs the callbacks of that batch in order.
Frames are handed to clients from those callbacks, so a client is never told anything that
is not already committed, and 50 streaming turns cost a handful of transactions, not
thousands.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Callable, Sequence

from chat_agent.store.base import ConstraintError, Store
from chat_agent.store.ops import AppendEvents, Op, op_scope

log = logging.getLogger(__name__)

Callback = Callable[[], None]


def _coalesce(ops: list[Op]) -> list[Op]:
    """Merges the AppendEvents of one conversation that sit between other operations."""
    merged: list[Op] = []
    pending: dict[str, AppendEvents] = {}
    for op in ops:
        if isinstance(op, AppendEvents):
            prior = pending.get(op.conversation_id)
            pending[op.conversation_id] = op if prior is None else AppendEvents(
                owner=op.owner, conversation_id=op.conversation_id, events=prior.events + op.events)
            continue
        merged.extend(pending.values())
        pending.clear()
        merged.append(op)
    merged.extend(pending.values())
    return merged


class StoreWriter:
    def __init__(self, store: Store, *, retry_delay: float = 0.2, attempts: int = 3):
        self._store = store
        self._ops: list[Op] = []
        self._callbacks: list[Callback] = []
        self._wake = asyncio.Event()
        self._submitted = 0  # tickets: the n-th submit is committed once `_committed >= n`
        self._committed = 0
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._retry_delay = retry_delay
        self._attempts = attempts
        self._task: asyncio.Task[None] | None = None
        self._closing = False

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="store-writer")

    def submit(self, ops: Sequence[Op], on_commit: Callback | None = None) -> int:
        """Queues ops; returns a ticket for `wait_for`. Never blocks."""
        if self._closing:
            raise RuntimeError("store writer is closed")
        self._ops.extend(ops)
        if on_commit is not None:
            self._callbacks.append(on_commit)
        self._submitted += 1
        self._wake.set()
        return self._submitted

    @property
    def ticket(self) -> int:
        return self._submitted

    async def wait_for(self, ticket: int) -> None:
        """Returns once the submit that got `ticket` (and all before it) is committed."""
        if ticket <= self._committed:
            return
        future = asyncio.get_running_loop().create_future()
        self._waiters.append((ticket, future))
        await future

    async def flush(self) -> None:
        await self.wait_for(self._submitted)

    async def close(self) -> None:
        await self.flush()
        self._closing = True
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            ops, callbacks, ticket = self._ops, self._callbacks, self._submitted
            self._ops, self._callbacks = [], []
            if ops:
                await self._apply(_coalesce(ops))
            self._committed = ticket
            for callback in callbacks:
                try:
                    callback()
                except Exception:
                    log.exception("commit callback failed")
            self._release(ticket)

    async def _apply_apart(self, ops: list[Op]) -> None:
        groups: dict[str, list[Op]] = {}
        for op in ops:
            groups.setdefault(op_scope(op), []).append(op)
        for scope, group in groups.items():
            try:
                await self._store.apply(group)
            except Exception:
                log.critical("dropped %d operations of %s", len(group), scope, exc_info=True)

    def _release(self, ticket: int) -> None:
        still: list[tuple[int, asyncio.Future[None]]] = []
        for wanted, future in self._waiters:
            if wanted <= ticket:
                if not future.done():
                    future.set_result(None)
            else:
                still.append((wanted, future))
        self._waiters = still

    async def _apply(self, ops: list[Op]) -> None:
        # A busy or briefly failing disk gets a few more tries before the batch is given up:
        # a batch that fails every time is a bug, and stalling every conversation behind it
        # would be worse than losing it (loudly).
        for attempt in range(1, self._attempts + 1):
            try:
                await self._store.apply(ops)
                return
            except asyncio.CancelledError:
                raise
            except ConstraintError:
                await self._apply_apart(ops)  # a bug in one conversation's ops: spare the others
                return
            except Exception:
                log.exception("store commit failed (attempt %d of %d)", attempt, self._attempts)
                if attempt < self._attempts:
                    await asyncio.sleep(self._retry_delay * attempt)
        log.critical("dropped a batch of %d store operations after %d attempts", len(ops), self._attempts)

"""Group commit: every state change goes through one ordered queue into the store.

Callers submit operations synchronously and go on; a single task applies everything that
queued up meanwhile in one transaction, then runs the callbacks of that batch in order.
Frames are handed to clients from those callbacks, so a client is never told anything that
is not committed, and 50 streaming turns cost a handful of transactions, not thousands.

A big write (a summary replacing a history, a large artifact version) must not hold up
other conversations' frames: the scopes with one are committed in a transaction of their
own, after the others' (order within a scope is kept; scopes never touch each other's rows).

Urgent work goes first (the lane for what a person waits on: a turn's `done`, an abort's
frames, an approval, a turn's first text; see `submit`). What a batch holds is committed in
chunks of at most CHUNK characters, and before each chunk the scopes with urgent work queued
take their turn: all that is queued of such a scope (its earlier, bulk submissions too, in
order: a conversation's frames are stored in seq order) is committed in a transaction of its
own, ahead of the bulk rows of other scopes. So an urgent frame waits for one bounded chunk
at most, never for thousands of other conversations' rows, and the event loop (on which a
small commit runs, see SqliteStore) is let go between chunks to take in what came meanwhile.
With nothing under way, a store that can commit without waiting (SQLite, `Store.apply_now`)
takes an urgent submission, with its scope's queued writes, in the step that submitted it:
its callbacks run before `submit` returns, not a pass of the event loop later (`_commit_now`).

A batch that fails is retried scope by scope (a conversation, a user's memories, a file:
see `op_scope`), each in a transaction of its own, so one conversation's bad write fails
that conversation only. A store that is unavailable (a cut connection, a full disk) loses
nothing: what it refused waits at the head of the queue, in order, and is tried again with
a growing pause until the store takes it; meanwhile the writer says it is `unavailable` (and
puts False, then True once it is back, in `availability`). The ops of a scope that can never
be stored (a broken constraint, another instance's lease) are lost: callbacks waiting on
them never run (a submit spanning scopes is told only if all of it was stored), later
submissions of that scope are refused until `reopen`, and the scope is put in `losses`, so
that whoever holds the scope's state in memory brings it back in line with the store.

A commit whose connection failed while it was under way may have been stored all the same
(the database committed, the answer was lost): its submissions are in doubt. Before anything
is tried again the writer reads one event of that transaction back (it commits whole or not
at all), or, for a transaction without events, the mark it wrote with it (`MarkCommit`):
found, they are stored and not written twice (which would break a unique key, the log's seq
or a turn's id, and lose the scope); not found, they are tried again. A commit that has not
ended after STALLED seconds makes the store count as unavailable at once (a database behind
a broken network path hangs rather than fails).

With several instances, a conversation's writes are fenced by the lease its instance holds
(`fence`): each submit of that scope from then on carries the lease's `(instance, epoch)`,
and the store refuses the batch if the lease changed hands. A fenced-out scope is lost at
once like a broken constraint (another instance owns it now: retrying cannot help), and the
batch's other scopes are committed without it.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from dataclasses import dataclass, field
from typing import Callable, Sequence

from chat_agent.store.base import ConstraintError, FencedOut, Store, StoreError, StoreUnavailable
from chat_agent.ids import new_id
from chat_agent.store.ops import (AddArtifactVersion, AppendEvents, AppendHistory, MarkCommit, Op, ReplaceHistory,
                                  op_scope)
from chat_agent.store.records import EventRecord
from chat_agent.urgency import Hold, Urgency

log = logging.getLogger(__name__)

Callback = Callable[[], None]
SLOW_COMMIT = 0.25  # seconds; a commit slower than this delays every stream noticeably
HEAVY = 64 * 1024  # characters a scope writes in one batch past which it commits on its own
# Before a commit the writer lets the event loop run until it is idle (see `_settle`): a
# turn of the loop shorter than IDLE_PASS seconds ran nothing else. It waits SETTLE_MAX
# seconds at most, and no longer once SETTLED submissions have queued.
IDLE_PASS = 50e-6
SETTLE_MAX = 0.002
SETTLED = 16
# Characters a chunk of bulk writes holds at most (an op counts OP_CHARS more): a commit
# urgent work may wait for (on SQLite ~1-3 ms on the event loop). See the module's doc.
CHUNK = 48 * 1024
OP_CHARS = 256
# Seconds a write that nobody waits for (no callback, no `wait_for`) may wait for the next
# commit; see `_submit`.
DEFER = 0.02
# Seconds between attempts while the store is unavailable: the first pause, doubled up to the
# longest. An attempt that has not ended after APPLY_TIMEOUT seconds failed (a hung connection).
RETRY_FIRST, RETRY_LONGEST = 0.1, 2.0
APPLY_TIMEOUT = 15.0
# Seconds after which a commit that has not ended makes the store count as unavailable,
# counted in STALL_STEPS steps (see `_stalled`).
STALLED = 3.0
STALL_STEPS = 6
# Seconds an instance that stops waits for an unavailable store to take what it still holds.
CLOSE_GRACE = 20.0
# Failures that say the store is unavailable, not that the write is wrong: waited out.
UNAVAILABLE = (StoreUnavailable, OSError, TimeoutError, sqlite3.OperationalError)


def _clock() -> float:
    """The event loop's clock (monotonic; virtual in the simulation, see tests/sim)."""
    return asyncio.get_running_loop().time()


class NotStored(StoreError):
    """The ops awaited with `StoreWriter.commit` could not be stored."""


@dataclass(slots=True, eq=False)
class _Outcome:
    """What waits on one submit: its callback and future, settled once every part is."""

    on_commit: Callback | None
    done: asyncio.Future[None] | None  # for `commit`
    parts: int
    lost: bool = False

    def settle(self, committed: bool) -> None:
        self.lost = self.lost or not committed
        self.parts -= 1
        if self.parts:
            return
        if not self.lost and self.on_commit is not None:
            try:
                self.on_commit()
            except Exception:
                log.exception("commit callback failed")
        if self.done is not None and not self.done.done():
            if self.lost:
                self.done.set_exception(NotStored("the store could not save this"))
            else:
                self.done.set_result(None)


@dataclass(slots=True, eq=False)
class _Submission:
    """The ops of one submit that belong to one scope: they stand or fall together."""

    ops: list[Op]
    scope: str
    outcome: _Outcome
    fence: tuple[str, int] | None = None  # the scope's lease when it was submitted
    ticket: int = 0  # of its submit
    urgent: bool = False  # its scope's queued writes go ahead of other scopes' (see `submit`)
    lost: bool = False
    stored: bool = False  # an attempt that seemed to fail was found committed (see `_resolve`)
    failures: int = 0  # attempts that failed for a reason other than an unavailable store


@dataclass(slots=True, eq=False)
class _Doubt:
    """The submissions of a commit that failed on the way (a lost connection, a timeout):
    stored or not, as one of its events says once the store answers again (`probe`), or,
    for a commit without events, the writer's mark (`mark`) written with it."""

    probe: tuple[str, EventRecord] | None  # (owner, event)
    mark: int | None
    submissions: list[_Submission]


def _probe(submissions: list[_Submission]) -> tuple[str, EventRecord] | None:
    """An event the submissions write: found in the store, the transaction that wrote them committed."""
    for submission in reversed(submissions):
        for op in reversed(submission.ops):
            if isinstance(op, AppendEvents) and op.events:
                return op.owner, op.events[-1]
    return None


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


def _weight(op: Op) -> int:
    """Roughly the characters an op writes (the big ones only; the rest count as small). A
    version counts whole even when it may be kept as a delta: the store decides in the write
    itself whether a snapshot is due, so the writer cannot tell and keeps on the safe side."""
    match op:
        case AppendEvents():
            return sum(len(event.frame) for event in op.events)
        case AppendHistory() | ReplaceHistory():
            return sum(item.chars for item in op.items)
        case AddArtifactVersion():
            return len(op.version.content)
    return 0


def _split(batch: list[_Submission]) -> tuple[list[_Submission], list[_Submission]]:
    """The submissions of light scopes, then those of scopes that write a lot this batch."""
    weights: dict[str, int] = {}
    for submission in batch:
        weights[submission.scope] = weights.get(submission.scope, 0) + sum(_weight(op) for op in submission.ops)
    heavy = {scope for scope, weight in weights.items() if weight > HEAVY}
    if not heavy or len(heavy) == len(weights):
        return batch, []
    return [s for s in batch if s.scope not in heavy], [s for s in batch if s.scope in heavy]


def _chunks(batch: list[_Submission], limit: int) -> list[list[_Submission]]:
    """The batch cut, in order, into chunks of at most `limit` characters (a submission that
    writes more is a chunk of its own)."""
    chunks: list[list[_Submission]] = []
    size = limit
    for submission in batch:
        weight = sum(_weight(op) + OP_CHARS for op in submission.ops)
        if size + weight > limit:
            chunks.append([])
            size = 0
        chunks[-1].append(submission)
        size += weight
    return chunks


@dataclass(slots=True)
class _Round:
    """What one wake of the writer commits: the chunks still to write, and the submissions
    that wait for the store (tried again, in order, once it takes writes)."""

    chunks: list[list[_Submission]]
    waiting: list[_Submission] = field(default_factory=list)
    refusals: int = 0  # scopes in a row that found the store unavailable (see `_by_scope`)

    def without(self, scopes: set[str]) -> list[_Submission]:
        """Takes the submissions of `scopes` out of the chunks to write; returns them in order."""
        taken = [s for chunk in self.chunks for s in chunk if s.scope in scopes]
        if taken:
            self.chunks = [kept for chunk in self.chunks if (kept := [s for s in chunk if s.scope not in scopes])]
        return taken

    def take(self, picked: set[int]) -> None:
        """Takes the submissions of these ids out of the chunks to write (those that are there)."""
        self.chunks = [kept for chunk in self.chunks if (kept := [s for s in chunk if id(s) not in picked])]


def _by_scope(ops: Sequence[Op]) -> dict[str, list[Op]]:
    scopes: dict[str, list[Op]] = {}
    for op in ops:
        scopes.setdefault(op_scope(op), []).append(op)
    return scopes


class StoreWriter:
    def __init__(self, store: Store, *, retry_delay: float = RETRY_FIRST, attempts: int = 3, chunk: int = CHUNK,
                 urgency: Urgency | None = None):
        self._store = store
        self._chunk = chunk
        # Bulk chunks wait while an abort is under way elsewhere (unwinding its turn): its
        # own commit then meets a loop that is not busy with thousands of rows.
        self._urgency = urgency
        self._urgent_came: asyncio.Future[None] | None = None  # ends such a wait: ours to commit
        self._queue: list[_Submission] = []
        self._urgent = False  # urgent submissions were queued since the last look (`_take_urgent`)
        # Urgent writes are queued: other work pauses (chat_agent/urgency.py) until they are
        # committed, so that the writer's wake-up and commit, and the callbacks that send
        # their frames, each meet a short queue of ready tasks instead of every stream's share.
        self._hold = Hold(urgency)
        self._round: _Round | None = None  # while the writer commits
        self._wake = asyncio.Event()
        self._submitted = 0  # tickets: the n-th submit is processed once `_processed >= n`
        self._processed = 0
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._retry_delay = retry_delay
        self._attempts = attempts
        self._task: asyncio.Task[None] | None = None
        self._deferred: asyncio.TimerHandle | None = None  # the commit of writes nobody waits for
        self._closing = False
        self._abandoned = False  # stopped without a store that answers (see `drain`)
        self._stall: asyncio.TimerHandle | None = None  # see `_stalled`
        self._stall_due = 0.0
        self._stall_steps = 0
        self._id = new_id(hex_chars=16)  # this writer's name in its commit marks
        self._marks = 0  # the last mark written
        self._lost: set[str] = set()  # scopes whose writes fail until `reopen`
        self._handed: set[str] = set()  # scopes handed to another instance (see `hand_over`)
        self._doubts: list[_Doubt] = []  # commits that failed on the way, maybe stored
        self._settling = False  # running the callbacks of a commit made in `_commit_now`
        self._fences: dict[str, tuple[str, int]] = {}  # scope -> (instance, epoch) of its lease
        self._asked_at = 0.0  # when the pending commit was first asked for (`_clock`)
        self._busy = False  # whether the event loop was found busy before this batch
        # The scopes that lost writes, in order, for whoever brings them back in line.
        self.losses: asyncio.Queue[str] = asyncio.Queue()
        self._unavailable_since: float | None = None  # `_clock`
        # False when the store became unavailable, True when it took everything again.
        self.availability: asyncio.Queue[bool] = asyncio.Queue()

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="store-writer")

    def submit(self, ops: Sequence[Op], on_commit: Callback | None = None, *, urgent: bool = False) -> int:
        """Queues ops; returns a ticket for `wait_for`. Never waits. The callback runs once
        they are committed, and never if any of them is lost. Urgent ops (what a person waits
        on) are committed ahead of other scopes' queued writes, with their own scope's
        earlier ones: only the order across scopes changes, which `op_scope` allows; with
        nothing under way, where the store can, before this returns (`_commit_now`)."""
        return self._submit(ops, on_commit, None, urgent)

    async def commit(self, ops: Sequence[Op]) -> None:
        """Submits ops and returns once they are committed; NotStored if they were lost.
        Urgent: someone waits for them."""
        done = asyncio.get_running_loop().create_future()
        self._submit(ops, None, done, True)
        await done

    def _commit_now(self, submission: _Submission) -> bool:
        """Commits an urgent submission with what its scope queued before it, in the caller's
        step, where the store can without waiting (`Store.apply_now`: SQLite, its write lock
        free) and the writer has nothing under way: its callbacks (the frame handed to the
        sockets) run now, not once the writer's task has its turn of the loop, tens of ms
        later under load. False where it did not: the submission is queued as any, and the
        writer, which handles every failure, commits it. Not from a commit's callback: the
        callbacks of the commit under way would run after those of the nested one."""
        if self._settling or self._round is not None or self._doubts or self._unavailable_since is not None:
            return False
        earlier = [s for s in self._queue if s.scope == submission.scope]
        taken = [*earlier, submission]
        fence = next((s.fence for s in taken if s.fence is not None), None)
        try:
            if not self._store.apply_now(_coalesce([op for s in taken for op in s.ops]),
                                         {submission.scope: fence} if fence is not None else None):
                return False
        except Exception:  # nothing applied: the writer tries again and handles what it meets
            return False
        if earlier:
            self._queue = [s for s in self._queue if s.scope != submission.scope]
        self._settling = True
        try:
            for taken_one in taken:
                taken_one.outcome.settle(committed=True)
        finally:
            self._settling = False
        return True

    def _submit(self, ops: Sequence[Op], on_commit: Callback | None, done: asyncio.Future[None] | None,
                urgent: bool) -> int:
        if self._closing and not self._abandoned:
            raise RuntimeError("store writer is closed")
        parts = _by_scope(ops) or {"": []}
        outcome = _Outcome(on_commit, done, len(parts))
        if self._abandoned:  # stopping without a store: what a turn's abort says is not stored
            for _ in parts:
                outcome.settle(committed=False)
            return self._submitted
        for scope, scope_ops in parts.items():
            if scope in self._lost or scope in self._handed:
                outcome.settle(committed=False)  # its state is being brought back in line, or not ours
            else:
                submission = _Submission(scope_ops, scope, outcome, self._fences.get(scope), self._submitted + 1, urgent)
                if urgent and len(parts) == 1 and self._commit_now(submission):
                    continue
                self._queue.append(submission)
                self._urgent = self._urgent or urgent
                if urgent and not self.unavailable:  # (nothing to hurry while the store is out)
                    self._hold.take()
                if urgent and self._urgent_came is not None and not self._urgent_came.done():
                    self._urgent_came.set_result(None)
        self._submitted += 1
        if not self._queue and self._round is None:
            self._processed = self._submitted  # (committed at once: nothing else is under way)
            self._release(self._processed)
        elif on_commit is not None or done is not None:
            self._ask()
        elif self._deferred is None:
            # Nobody is told of these ops (a turn's start, a history item): they join the
            # next commit, which a frame or a `wait_for` asks for, or commit DEFER seconds
            # from now. A turn's start (the turn record, the user's message) thus shares its
            # commit with the turn's first frames instead of taking one of its own: every
            # commit rewrites the conversation's hot pages, ~0.4 ms on the event loop.
            self._deferred = asyncio.get_running_loop().call_later(DEFER, self._ask)
        return self._submitted

    def _ask(self) -> None:
        """Wakes the writer for a commit."""
        if not self._wake.is_set():
            self._asked_at = _clock()
            self._wake.set()

    def fence(self, scope: str, instance: str, epoch: int) -> None:
        """Every later submit of `scope` (a conversation id) is applied only while its lease
        is still `(instance, epoch)`; else that scope is lost, `FencedOut` its error."""
        self._fences[scope] = (instance, epoch)

    def unfence(self, scope: str) -> None:
        """Later submits of `scope` are applied without a lease check."""
        self._fences.pop(scope, None)

    def drop(self, scope: str) -> None:
        """Another instance holds the scope's lease now: what waits under the old one would be
        fenced out once the store takes writes again, so it is lost at once (its frames are
        never shown from memory meanwhile)."""
        self._lose(scope, [], FencedOut([scope]))

    def hand_over(self, scope: str) -> None:
        """This instance stops and leaves the scope as the store holds it, for another one to
        go on from: what it submits from now on is dropped (what was submitted before is
        still stored). Not a loss: nothing is to be brought back in line."""
        self._handed.add(scope)

    def lost(self, scope: str) -> bool:
        """Whether the scope's writes are refused (since a failure, until `reopen`)."""
        return scope in self._lost

    def reopen(self, scope: str) -> None:
        """Accepts the scope's writes again: its state in memory matches the store once more."""
        self._lost.discard(scope)

    @property
    def ticket(self) -> int:
        return self._submitted

    @property
    def unavailable(self) -> bool:
        """Whether writes wait for the store to take them again."""
        return self._unavailable_since is not None

    def unavailable_for(self) -> float:
        """Seconds the store has been unavailable (0 when it is not)."""
        since = self._unavailable_since
        return 0.0 if since is None else _clock() - since

    async def wait_for(self, ticket: int) -> None:
        """Returns once the submit that got `ticket` (and all before it) is processed:
        committed, or lost and reported in `losses`."""
        if ticket <= self._processed:
            return
        self._ask()  # someone waits: no deferring
        future = asyncio.get_running_loop().create_future()
        self._waiters.append((ticket, future))
        await future

    async def flush(self) -> None:
        await self.wait_for(self._submitted)

    async def drain(self, grace: float = CLOSE_GRACE) -> bool:
        """Like `flush`, for an instance that stops: a store unavailable for `grace` seconds
        is not waited for any longer (an instance told to stop must stop; waiting for a cut
        database would keep it until it is killed, with the same loss). What could not be
        stored is logged as lost, and the writer stops for good. False if anything was."""
        if self._abandoned:
            return False
        flushed = asyncio.ensure_future(self.flush())
        while not flushed.done():
            await asyncio.wait([flushed], timeout=0.5)
            if not flushed.done() and self.unavailable_for() >= grace:
                flushed.cancel()
                await self._abandon()
                return False
        return True

    async def _abandon(self) -> None:
        """Stops for good without storing what waits: each waiting `commit` gets NotStored,
        each `wait_for` returns, and later submits are refused."""
        self._closing = self._abandoned = True
        if self._deferred is not None:
            self._deferred.cancel()
            self._deferred = None
        left = sum(len(s.ops) for s in self._queue)
        log.error("stopping with the store unavailable for %.0f s: %d writes were not stored",
                  self.unavailable_for(), left)
        round_ = self._round
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        queue, self._queue = self._queue, []
        if round_ is not None:  # what the batch under way had not tried yet, or held back
            queue = round_.waiting + [s for chunk in round_.chunks for s in chunk] + queue
        for submission in queue:
            submission.outcome.settle(committed=False)
        self._hold.release()
        self._processed = self._submitted
        self._release(self._processed)

    async def close(self, grace: float = CLOSE_GRACE) -> None:
        if self._closing:
            return
        await self.drain(grace)
        self._closing = True
        if self._deferred is not None:
            self._deferred.cancel()
            self._deferred = None
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        self._hold.release()

    async def _run(self) -> None:
        pause = self._retry_delay
        while True:
            await self._wake.wait()
            # A loop so busy that waking up took longer than settling may: what settling
            # would gather has queued meanwhile, and one more turn of such a loop would hold
            # every frame of the batch back by as long again. The store is told too (see
            # SqliteStore: a thread would wait on the GIL behind the loop).
            self._busy = _clock() - self._asked_at >= SETTLE_MAX or not await self._settle()
            self._wake.clear()
            if self._deferred is not None:
                self._deferred.cancel()
                self._deferred = None
            batch, ticket = self._queue, self._submitted
            self._queue = []
            waiting = await self._commit_round(batch)
            if waiting:  # the store is unavailable: they go first, once it takes writes again
                self._queue = waiting + self._queue
                ticket = min(s.ticket for s in waiting) - 1
                self._went(available=False)
            else:
                self._went(available=True)
            self._processed = max(self._processed, ticket)
            self._release(self._processed)
            if waiting:
                await asyncio.sleep(pause)
                pause = min(pause * 2, RETRY_LONGEST)
                self._wake.set()
            else:
                pause = self._retry_delay

    async def _commit_round(self, batch: list[_Submission]) -> list[_Submission]:
        """Commits the batch chunk by chunk, each scope with urgent work queued (in the batch or
        since) ahead of the next chunk; returns the submissions to try again, in order."""
        light, heavy = _split(batch)
        round_ = self._round = _Round(_chunks(light, self._chunk) + _chunks(heavy, self._chunk))
        self._urgent = True  # the batch's own urgent work goes first
        paused = False
        try:
            while True:
                while urgent := self._take_urgent(round_):
                    await self._commit_part(round_, urgent)
                self._hold.release()  # the urgent writes are in: streams go on
                if not round_.chunks:
                    return round_.waiting
                if not paused and not self._urgent and self._urgency is not None and self._urgency.stopping:
                    paused = True  # once a chunk: bulk is held up, never starved
                    await self._let_urgent_go()
                    continue
                paused = False
                await self._commit_part(round_, round_.chunks.pop(0))
                if round_.chunks:
                    await asyncio.sleep(0)  # the loop takes in what came meanwhile (an abort, say)
        finally:
            self._round = None
            self._hold.release()  # urgent writes the store did not take wait, but streams do not

    async def _let_urgent_go(self) -> None:
        """Waits (bounded) while an abort is under way elsewhere, unless urgent writes come.
        Not for other urgent work (a stream's first item on its way to its turn): that ends
        in an urgent write of its own, which this wait would hold up. Woken by that write,
        the writer ran only two passes of the loop later, and with 200 first texts coming in
        those passes took 20 ms each (measured: first texts waited 41 ms here)."""
        assert self._urgency is not None
        self._urgent_came = asyncio.get_running_loop().create_future()
        try:
            await self._urgency.pause_for_stops(self._urgent_came)
        finally:
            self._urgent_came = None

    def _take_urgent(self, round_: _Round) -> list[_Submission]:
        """Of each scope with urgent work, what it wrote up to its first urgent submission, in
        order: what the round still holds of it (submitted earlier), then what was queued
        since. What the scope wrote after that waits for the next look, which comes before
        the next bulk chunk if it holds urgent work too: a turn that came in a burst has its
        first text stored (and sent) before the rest of its reply, and every other turn's
        first text before that rest too, instead of each waiting for all of it."""
        if not self._urgent:
            return []
        self._urgent = False
        pending = [s for chunk in round_.chunks for s in chunk]
        pending += self._queue
        taking = {s.scope for s in pending if s.urgent}
        if not taking:
            return []
        taken: list[_Submission] = []
        for submission in pending:
            if submission.scope in taking:
                taken.append(submission)
                if submission.urgent:
                    taking.discard(submission.scope)  # its prefix is complete
        picked = {id(s) for s in taken}
        round_.take(picked)
        self._queue = [s for s in self._queue if id(s) not in picked]
        self._urgent = any(s.urgent for s in pending if id(s) not in picked)
        return taken

    async def _commit_part(self, round_: _Round, part: list[_Submission]) -> None:
        """Commits a part of the round, but not what a scope whose earlier writes wait for the
        store submitted after them: that waits too, behind them."""
        if held := {s.scope for s in round_.waiting}:
            round_.waiting += [s for s in part if s.scope in held]
            part = [s for s in part if s.scope not in held]
        if not part:
            return
        # Timed per commit, not per batch: a batch of several commits, each in time, is no
        # sign of a store that does not answer.
        self._arm_stall()
        try:
            round_.waiting += await self._commit(part)
        finally:
            if self._stall is not None:
                self._stall.cancel()
                self._stall = None

    def _arm_stall(self) -> None:
        self._stall_steps = 0
        self._step_stall()

    def _step_stall(self) -> None:
        self._stall_due = _clock() + STALLED / STALL_STEPS
        self._stall = asyncio.get_running_loop().call_later(STALLED / STALL_STEPS, self._stalled)

    def _stalled(self) -> None:
        """A step of STALLED seconds in which a commit has not ended: after all of them, a
        store that does not answer (a database behind a broken network path) is unavailable
        long before a timeout says so. Unless a step came late: then the process was stopped
        or starved meanwhile, which says nothing of the store, and the commit gets STALLED
        seconds more from now. Counted in steps, since one timer over the whole time, late by
        less than a third of it, says nothing of a process stopped from just after the commit
        began (SIGSTOP, a paused VM) until just after the timer was due."""
        if _clock() - self._stall_due > STALLED / 3:
            self._arm_stall()
            return
        self._stall_steps += 1
        if self._stall_steps < STALL_STEPS:
            self._step_stall()
            return
        self._stall = None
        self._store_stalled()

    def _store_stalled(self) -> None:
        if self._unavailable_since is None:
            log.warning("a store commit has not ended for %.0f s: the store is taken as unavailable", STALLED)
            self._went(available=False)
            self._unavailable_since = _clock() - STALLED

    def _went(self, *, available: bool) -> None:
        if available == (self._unavailable_since is None):
            return
        if available:
            log.warning("the store takes writes again, after %.1f s", self.unavailable_for())
            self._unavailable_since = None
        else:
            log.warning("the store is unavailable: %d writes wait for it, in order", len(self._queue))
            self._unavailable_since = _clock()
        self.availability.put_nowait(available)

    async def _settle(self) -> bool:
        """Lets the event loop run until it has nothing else to do before a commit. What a
        turn does next without waiting on the network joins this commit instead of taking
        one more: the last text, `context_update` and `done` of a step, and also a tool
        that returns at once with its `tool_end`. And the commit (a few tenths of a ms on the
        loop) runs once the turn waits for the model (its request sent), not between its
        steps, where it would hold the turn up (measured on a one-tool turn: 2 commits
        instead of 4, and ~1.5 ms less from `message` to `done`). Under load the batch
        fills up (SETTLED), or a turn of the loop alone takes SETTLE_MAX: then no more
        turns are waited for than before (one), which would hold every frame back.
        False when the loop was found busy."""
        started = _clock()
        await asyncio.sleep(0)
        while len(self._queue) < SETTLED:
            before = _clock()
            if before - started > SETTLE_MAX:
                return False  # a busy loop, where one more turn could take long: commit now
            await asyncio.sleep(0)
            if _clock() - before < IDLE_PASS:
                return True
        return True

    async def _commit(self, batch: list[_Submission]) -> list[_Submission]:
        """Writes the submissions and runs their callbacks (those stored) in order; returns
        those to try again (the store was unavailable), in order."""
        started = _clock()
        waiting = await self._write(batch)
        took = _clock() - started
        if took > SLOW_COMMIT:
            log.warning("a store commit of %d submissions took %.0f ms", len(batch), took * 1000)
        again = {id(s) for s in waiting}
        for submission in batch:
            if id(submission) not in again:
                submission.outcome.settle(committed=not submission.lost)
        return waiting

    async def _write(self, batch: list[_Submission]) -> list[_Submission]:
        if self._round is not None and self._round.refusals >= 2:
            return batch  # the store was found unavailable this round: not tried again now
        error = await self._try(batch)
        # The store names every conversation whose lease changed hands: those are lost at
        # once, and the rest goes in again together.
        while isinstance(error, FencedOut) and (fenced := set(error.conversation_ids) & {s.scope for s in batch}):
            for scope in fenced:
                self._lose(scope, [s for s in batch if s.scope == scope], error)
            batch = [s for s in batch if s.scope not in fenced]
            if not batch:
                return []
            error = await self._try(batch)
        if error is None:
            return []
        if not self.unavailable:
            log.warning("a store commit of %d submissions failed (%s); trying scope by scope", len(batch), error)
        return await self._by_scope(batch)

    async def _by_scope(self, batch: list[_Submission]) -> list[_Submission]:
        """Tries each scope in a transaction of its own; returns the submissions to try again.
        A broken constraint never heals, nor does a lease another instance took: lost. An
        unavailable store is waited out; once two scopes in a row found it so, the others
        wait too, untried (a cut database would fail each after its own timeout)."""
        pending: dict[str, list[_Submission]] = {}
        for submission in batch:
            pending.setdefault(submission.scope, []).append(submission)
        waiting: list[_Submission] = []
        round_ = self._round or _Round([])
        for scope, submissions in pending.items():
            if round_.refusals >= 2:
                waiting += submissions
                continue
            error = await self._try(submissions)
            if error is None:
                round_.refusals = 0
            elif isinstance(error, (ConstraintError, FencedOut)):
                self._lose(scope, submissions, error)
            elif isinstance(error, UNAVAILABLE):
                round_.refusals += 1
                waiting += submissions
            elif max(s.failures for s in submissions) + 1 >= self._attempts:
                self._lose(scope, submissions, error)  # not the store's state: something no retry mends
            else:
                for submission in submissions:
                    submission.failures += 1
                waiting += submissions
        return waiting

    async def _try(self, submissions: list[_Submission]) -> Exception | None:
        """Commits the submissions' ops in one transaction; the error if that failed. Those
        found stored already (see `_resolve`) are not written again."""
        for again in (False, True):
            # Found stored by an earlier try (`_resolve`): never written twice, also when the
            # try that found them failed afterwards and their scope is tried on its own.
            submissions = [s for s in submissions if not s.stored]
            if not submissions:
                return None
            if self._doubts:
                try:
                    async with asyncio.timeout(APPLY_TIMEOUT):
                        await self._resolve()
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # the store does not answer yet: nothing is tried
                    return StoreUnavailable(f"cannot tell whether a commit was stored: {exc}")
                submissions = [s for s in submissions if not s.stored]
                if not submissions:
                    return None
            fences: dict[str, tuple[str, int]] = {}
            for submission in submissions:
                # The oldest fence of a scope: if its lease changed hands since, what the scope
                # submitted later builds on it and is lost with it.
                if submission.fence is not None:
                    fences.setdefault(submission.scope, submission.fence)
            ops = _coalesce([op for s in submissions for op in s.ops])
            probe, mark = _probe(submissions), None
            if probe is None:  # nothing to read back but a mark of this commit
                self._marks += 1
                mark = self._marks
                ops.append(MarkCommit(self._id, mark))
            # Urgent work commits as on a busy loop, on the loop itself if the store can: a
            # thread's answer waits for the loop's next pass, and the first texts of 200
            # turns come in one burst that makes that pass long (measured: a 17-row commit
            # of first texts took 0.4 ms on the write thread and came back 11 ms later).
            busy = self._busy or any(s.urgent for s in submissions)
            try:
                async with asyncio.timeout(APPLY_TIMEOUT):
                    await self._store.apply(ops, fences or None, busy=busy)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if isinstance(exc, ConstraintError) and not again and self._in_doubt(submissions):
                    # A commit in doubt that was still on its way (cancelled by the timeout,
                    # say) may have landed since it was looked for: look again.
                    continue
                if isinstance(exc, UNAVAILABLE):
                    self._doubts.append(_Doubt(probe, mark, submissions))
                    log.info("a commit of %d submissions is in doubt (%s)", len(submissions), exc)
                return exc
            # Written now: an earlier commit of any of them did not store them (nor, being
            # one transaction, the rest of its submissions).
            written = {id(s) for s in submissions}
            self._doubts = [d for d in self._doubts if not any(id(s) in written for s in d.submissions)]
            return None
        raise AssertionError("unreachable")

    def _in_doubt(self, submissions: list[_Submission]) -> bool:
        doubted = {id(s) for doubt in self._doubts for s in doubt.submissions}
        return any(id(s) in doubted for s in submissions)

    async def _resolve(self) -> None:
        """Looks for the commits in doubt: each one's probe event read back, as written (it was
        stored: its submissions are not written again) or not there yet (they are tried again,
        and looked for again if that meets what they wrote)."""
        for doubt in list(self._doubts):
            if all(s.stored or s.lost for s in doubt.submissions):
                self._doubts.remove(doubt)
                continue
            if doubt.probe is not None:
                owner, event = doubt.probe
                found = await self._store.events_after(owner, event.conversation_id, event.seq - 1, limit=1)
                stored = bool(found) and found[0].seq == event.seq and found[0].frame == event.frame
            else:
                stored = await self._store.commit_marked(self._id, doubt.mark or 0)
            if stored:
                log.warning("a commit that seemed to fail was stored (%d submissions): not written again",
                            len(doubt.submissions))
                for submission in doubt.submissions:
                    submission.stored = True
                self._doubts.remove(doubt)

    def _lose(self, scope: str, submissions: list[_Submission], error: Exception) -> None:
        count = sum(len(s.ops) for s in submissions)
        if isinstance(error, FencedOut):  # not a fault: another instance owns it now
            log.warning("%d operations of %s were fenced out: its lease changed hands", count, scope)
        else:
            seqs = [e.seq for s in submissions for op in s.ops if isinstance(op, AppendEvents) for e in op.events]
            log.error("could not store %d operations of %s (events %s); its writes are refused until it is reloaded",
                      count, scope, f"{seqs[0]}..{seqs[-1]}" if seqs else "none", exc_info=error)
        for submission in submissions:
            submission.lost = not submission.stored
        # What was queued behind them builds on them: it is lost as well.
        behind = self._round.without({scope}) if self._round is not None else []
        for submission in behind + [s for s in self._queue if s.scope == scope]:
            if submission in self._queue:
                self._queue.remove(submission)
            submission.outcome.settle(committed=False)
        self._lost.add(scope)
        self.losses.put_nowait(scope)

    def _release(self, ticket: int) -> None:
        still: list[tuple[int, asyncio.Future[None]]] = []
        for wanted, future in self._waiters:
            if wanted <= ticket:
                if not future.done():
                    future.set_result(None)
            else:
                still.append((wanted, future))
        self._waiters = still

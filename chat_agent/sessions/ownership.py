"""Which instance owns each conversation, and how the others reach it.

The owner of a conversation is the instance holding its lease (store leases: instance,
epoch, expiry by the database's clock). Only the owner writes a conversation's state and
allocates its `seq`; every write it submits is fenced by the lease's epoch, so an owner
that lost its lease (paused past the expiry, cut off from the database) cannot write after
another instance took over: its batch is refused and it stops.

- An instance claims a conversation's lease when a command needs to write it and nobody
  holds it; it keeps it while a turn runs and for a while after (the conversation stays
  loaded), renewing every lease it holds in one statement every third of the lease time.
- A command arriving where the conversation is not owned is forwarded to the owner over the
  bus and answered from there (`forwarding`).
- A lease that expired belongs to an instance that died (or stalled): another instance
  claims it and closes the turn that was running as interrupted.

What happens to leases (one of ours lost, another's expired) is told through `events`, a
queue that whoever serves this instance reads.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from chat_agent.store import Lease, Store, StoreWriter

log = logging.getLogger(__name__)

# Each instance holds a lease under this prefix and its own id while it runs: the leases
# say which instances are alive (`others`), and a dead one's expires like any other.
INSTANCE_PREFIX = "instance:"
RELEASE_WAIT = 5.0  # seconds a stopping instance spends giving its leases back (else they expire)


class Claim(enum.Enum):
    HELD = "held"  # this instance held it already: its state in memory is current
    GAINED = "gained"  # this instance has just taken it: load the conversation's state anew
    TAKEN = "taken"  # another instance holds it


@dataclass(frozen=True, slots=True)
class LeaseLost:
    """A lease this instance held is gone: what runs under it must stop."""

    conversation_id: str


@dataclass(frozen=True, slots=True)
class LeaseExpired:
    """Another instance stopped renewing a lease (it died, or lost the database)."""

    lease: Lease


class Ownership:
    def __init__(self, instance: str, store: Store, writer: StoreWriter, *, lease_seconds: float,
                 sweep_seconds: float, others: bool = False):
        self.instance = instance
        self._others = others  # other instances may share the store (see `start`)
        self._store = store
        self._writer = writer
        self._ttl = lease_seconds
        self._sweep_every = sweep_seconds
        self._held: dict[str, int] = {}  # conversation id -> epoch of the lease held
        self._claiming: dict[str, asyncio.Lock] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self.events: asyncio.Queue[LeaseLost | LeaseExpired] = asyncio.Queue()
        # Cut off from the database: others' leases may have run out only because they were
        # cut off too, so none is taken over until a lease period after it is reached again.
        self._cut_off = False
        self._quiet_until = 0.0  # monotonic

    async def start(self) -> None:
        await self.claim(INSTANCE_PREFIX + self.instance)
        loop = asyncio.get_running_loop()
        if self._others:
            # A new instance cannot tell a dead holder from one that was cut off from the
            # database, as it may have been itself until now (started while the database was
            # down): others' expired leases are taken over only once a lease period has
            # passed, in which a live holder renews them and stores what it showed meanwhile.
            self._quiet_until = loop.time() + self._ttl
        self._tasks = [loop.create_task(self._renew_loop(), name="lease-renew"),
                       loop.create_task(self._sweep_loop(), name="lease-sweep")]

    async def others(self) -> list[str]:
        """The other instances running on this store now."""
        return [name for name in await self._store.live_instances() if name != self.instance]

    async def close(self) -> None:
        """Stops renewing and gives back every lease (after the writes under them are stored),
        so that other instances take over at once instead of after the expiry."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        try:
            # A store that does not answer is not waited for: the leases expire by themselves.
            async with asyncio.timeout(min(self._ttl, RELEASE_WAIT)):
                for conversation_id in list(self._held):
                    await self.release(conversation_id)
        except TimeoutError:
            log.warning("stopping without giving every lease back: they expire within %.0f s", self._ttl)

    # ---- leases ---------------------------------------------------------------------------

    def holds(self, conversation_id: str) -> bool:
        return conversation_id in self._held

    def epoch(self, conversation_id: str) -> int | None:
        """The epoch of the lease held, None when not held."""
        return self._held.get(conversation_id)

    async def claim(self, conversation_id: str,
                    taken: Callable[[], Awaitable[None]] | None = None) -> tuple[Claim, str | None]:
        """Takes the conversation's lease unless another instance holds it; with TAKEN, the
        holder's instance id (None when the lease was released meanwhile: try again).
        `taken` runs when the lease has just changed hands (to read the conversation's state
        again), before any other claimer here is told HELD."""
        if conversation_id in self._held:
            return Claim.HELD, self.instance
        lock = self._claiming.setdefault(conversation_id, asyncio.Lock())
        async with lock:
            if conversation_id in self._held:
                return Claim.HELD, self.instance
            if self._wary():
                # Cut off from the database a moment ago: a lease another instance let expire may
                # have run out only because it was cut off too, with a backlog shown to its
                # clients and not stored yet. Not taken until a lease period has passed (as
                # takeovers wait), so that its holder can renew it and store the backlog.
                holder = await self._store.get_lease(conversation_id)
                if holder is not None and holder.instance != self.instance:
                    return Claim.TAKEN, holder.instance
            lease = await self._store.claim_lease(conversation_id, self.instance, self._ttl)
            if lease is None:
                holder = await self._store.get_lease(conversation_id)
                return Claim.TAKEN, holder.instance if holder is not None else None
            if taken is not None:
                try:
                    await taken()
                except BaseException:
                    await self._store.release_lease(conversation_id, self.instance, lease.epoch)
                    raise
            self._held[conversation_id] = lease.epoch
            self._writer.fence(conversation_id, self.instance, lease.epoch)
        self._claiming.pop(conversation_id, None)
        return Claim.GAINED, self.instance

    async def release(self, conversation_id: str, idle: Callable[[], bool] = lambda: True) -> None:
        """Gives the lease back once everything written under it is stored, if `idle()` still
        says nothing uses the conversation then. Writes submitted after it are refused (the
        fence stays, with an epoch no longer held)."""
        if conversation_id not in self._held:
            return
        lock = self._claiming.setdefault(conversation_id, asyncio.Lock())
        async with lock:
            epoch = self._held.get(conversation_id)
            if epoch is None:
                return
            while True:  # until nothing more was submitted while waiting
                ticket = self._writer.ticket
                await self._writer.wait_for(ticket)
                if self._writer.ticket == ticket:
                    break
            if self._held.get(conversation_id) != epoch or not idle():
                return
            del self._held[conversation_id]  # from here on a claim waits for the lock, and reloads
            try:
                await self._store.release_lease(conversation_id, self.instance, epoch)
            except Exception as exc:  # it expires by itself; another instance waits a little longer
                log.warning("could not release the lease of %s: %s", conversation_id, exc)
        self._claiming.pop(conversation_id, None)

    def forget(self, conversation_id: str) -> None:
        """The lease is gone (lost to another instance): writes under it stay refused."""
        self._held.pop(conversation_id, None)

    async def _renew_loop(self) -> None:
        # Every third of the lease time from one renewal's start to the next (not from its
        # end): a renewal that waited (a busy store or event loop) does not push the next
        # one back by as long again.
        loop = asyncio.get_running_loop()
        due = loop.time()
        while True:
            due = max(due + self._ttl / 3, loop.time())
            await asyncio.sleep(due - loop.time())
            if not self._held:
                continue
            asked = dict(self._held)
            try:
                # A renewal that hangs (a connection cut mid-way) must not hold the next one
                # back until the leases expire: it is given up when the next one is due.
                async with asyncio.timeout(self._ttl / 3):
                    renewed = await self._store.renew_leases(self.instance, self._ttl, list(asked))
            except Exception as exc:
                self._unreachable(exc, f"could not renew {len(asked)} leases")
                continue
            self._reached()
            kept = {lease.conversation_id for lease in renewed}
            for conversation_id, epoch in asked.items():
                if conversation_id not in kept and self._held.get(conversation_id) == epoch:
                    log.warning("lost the lease of %s (epoch %d): another instance owns it now", conversation_id, epoch)
                    self.forget(conversation_id)
                    self._writer.drop(conversation_id)
                    self.events.put_nowait(LeaseLost(conversation_id))

    async def _sweep_loop(self) -> None:
        while True:
            await asyncio.sleep(self._sweep_every)
            try:
                expired = await self._store.expired_leases()
            except Exception as exc:
                self._unreachable(exc, "could not look for expired leases")
                continue
            self._reached()
            if asyncio.get_running_loop().time() < self._quiet_until:
                continue
            # Ours are renewed (held) or given up (not): never taken over from ourselves.
            theirs = [lease for lease in expired if lease.instance != self.instance]
            for lease in theirs:
                self.events.put_nowait(LeaseExpired(lease))
            if theirs:
                await self.events.join()  # taken over before the next look finds them again

    def _wary(self) -> bool:
        """Whether this instance was cut off from the database within the last lease period."""
        return self._cut_off or asyncio.get_running_loop().time() < self._quiet_until

    def _unreachable(self, exc: Exception, what: str) -> None:
        if not self._cut_off:
            log.warning("%s: %s", what, exc)
        self._cut_off = True

    def _reached(self) -> None:
        if self._cut_off:
            self._cut_off = False
            self._quiet_until = asyncio.get_running_loop().time() + self._ttl
            log.warning("the database answers again: no lease is taken over for %.0f s", self._ttl)

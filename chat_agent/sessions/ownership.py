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
  bus and answered from there (`Forwarded`).
- A lease that expired belongs to an instance that died (or stalled): another instance
  claims it and closes the turn that was running as interrupted (`on_expired`).
"""

from __future__ import annotations

import asyncio
import enum
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from chat_agent.sessions.bus import Bus
from chat_agent.store import Lease, Store, StoreWriter

log = logging.getLogger(__name__)

FORWARD_TIMEOUT = 10.0  # seconds an owner has to answer a forwarded command
# Each instance holds a lease under this prefix and its own id while it runs: the leases
# say which instances are alive (`others`), and a dead one's expires like any other.
INSTANCE_PREFIX = "instance:"


class Claim(enum.Enum):
    HELD = "held"  # this instance held it already: its state in memory is current
    GAINED = "gained"  # this instance has just taken it: load the conversation's state anew
    TAKEN = "taken"  # another instance holds it


@dataclass(frozen=True, slots=True)
class Answer:
    """An owner's answer to a forwarded command."""

    status: str  # "ok", "rejected" (code, message: answer the client with them), "not_owner"
    code: str = ""
    message: str = ""


class OwnerUnreachable(Exception):
    """The instance holding the lease did not answer in time."""


class Ownership:
    def __init__(self, instance: str, store: Store, writer: StoreWriter, bus: Bus, *, lease_seconds: float,
                 sweep_seconds: float):
        self.instance = instance
        self._store = store
        self._writer = writer
        self._bus = bus
        self._ttl = lease_seconds
        self._sweep_every = sweep_seconds
        self._held: dict[str, int] = {}  # conversation id -> epoch of the lease held
        self._claiming: dict[str, asyncio.Lock] = {}
        self._answers: dict[str, asyncio.Future[Answer]] = {}
        self._tasks: list[asyncio.Task[None]] = []
        # Set by the hub: a lease this instance held was lost; what it ran there must stop.
        self.on_lost: Callable[[str], None] = lambda conversation_id: None
        # Set by the hub: a lease expired (its holder died); close what it left running.
        self.on_expired: Callable[[Lease], Awaitable[None]] = _nothing
        # Set by the hub: a command forwarded here; answer it.
        self.on_command: Callable[[dict[str, Any]], Awaitable[Answer]] = _not_owner

    async def start(self) -> None:
        await self.claim(INSTANCE_PREFIX + self.instance)
        loop = asyncio.get_running_loop()
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
        for conversation_id in list(self._held):
            await self.release(conversation_id)

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
        while True:
            await asyncio.sleep(self._ttl / 3)
            if not self._held:
                continue
            asked = dict(self._held)
            try:
                kept = {lease.conversation_id for lease in await self._store.renew_leases(self.instance, self._ttl)}
            except Exception as exc:
                log.warning("could not renew %d leases: %s", len(asked), exc)
                continue
            for conversation_id, epoch in asked.items():
                if conversation_id not in kept and self._held.get(conversation_id) == epoch:
                    log.warning("lost the lease of %s (epoch %d): another instance may own it now",
                                conversation_id, epoch)
                    self.forget(conversation_id)
                    self.on_lost(conversation_id)

    async def _sweep_loop(self) -> None:
        while True:
            await asyncio.sleep(self._sweep_every)
            try:
                expired = await self._store.expired_leases()
            except Exception as exc:
                log.warning("could not look for expired leases: %s", exc)
                continue
            for lease in expired:
                if lease.instance == self.instance and lease.conversation_id not in self._held:
                    continue  # ours, already given up in memory: it is released by whoever claims it
                try:
                    await self.on_expired(lease)
                except Exception:
                    log.exception("could not take over %s from %s", lease.conversation_id, lease.instance)

    # ---- forwarding -------------------------------------------------------------------------

    async def forward(self, instance: str, message: dict[str, Any], *, timeout: float = FORWARD_TIMEOUT) -> Answer:
        """Sends a command to the instance that owns its conversation and waits for its answer
        (OwnerUnreachable after `timeout` seconds)."""
        request = uuid.uuid4().hex
        answer: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        self._answers[request] = answer
        try:
            await self._bus.send(instance, {**message, "k": "cmd", "id": request, "from": self.instance})
            return await asyncio.wait_for(answer, timeout)
        except asyncio.TimeoutError:
            raise OwnerUnreachable(instance) from None
        finally:
            self._answers.pop(request, None)

    def received(self, message: dict[str, Any]) -> None:
        """A direct message from another instance: a command to run here, or an answer."""
        if message.get("k") == "answer":
            future = self._answers.get(message.get("id", ""))
            if future is not None and not future.done():
                future.set_result(Answer(message["status"], message.get("code", ""), message.get("message", "")))
        elif message.get("k") == "cmd":
            task = asyncio.get_running_loop().create_task(self._answer(message), name="forwarded-command")
            self._tasks.append(task)
            task.add_done_callback(self._tasks.remove)

    async def _answer(self, message: dict[str, Any]) -> None:
        try:
            answer = await self.on_command(message)
        except Exception:
            log.exception("a forwarded command failed")
            answer = Answer("rejected", "internal", "The server failed to handle that frame.")
        reply = {"k": "answer", "id": message["id"], "status": answer.status, "code": answer.code,
                 "message": answer.message}
        try:
            await self._bus.send(message["from"], reply)
        except Exception as exc:
            log.warning("could not answer a command forwarded by %s: %s", message.get("from"), exc)


async def _nothing(lease: Lease) -> None:
    return None


async def _not_owner(message: dict[str, Any]) -> Answer:
    return Answer("not_owner")

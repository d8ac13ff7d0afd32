"""Delivers a conversation's frames once each, in `seq` order, across reconnects.

Pure bookkeeping, no I/O and no clock of its own (the caller passes `now`), so every case
can be replayed in a unit test.

Why a reorder buffer and not just "drop seq <= last": after a reconnect the server may
start sending live frames before it has replayed the ones we missed (PROTOCOL.md does not
say whether a new connection is attached to the live stream before or after `resume`).
Accepting the first live frame would move `last_seq` past the gap and the replay that
fills it would then be dropped as duplicates. So a frame beyond a gap is held until the
gap fills; if it never fills (the server no longer holds those events) the held frames
are released after `gap_timeout` and the gap is recorded in `gaps`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar


class HasSeq(Protocol):
    @property
    def seq(self) -> int | None: ...


F = TypeVar("F", bound=HasSeq)


@dataclass
class SeqOrderer(Generic[F]):
    last_seq: int = 0
    gap_timeout: float = 2.0
    gaps: list[tuple[int, int]] = field(default_factory=list)  # (first missing, last missing)
    _held: dict[int, F] = field(default_factory=dict)
    _held_since: float | None = None

    def push(self, frame: F, now: float) -> list[F]:
        """The frames that can be delivered now, in order (often just `frame`, or nothing)."""
        seq = frame.seq
        if seq is None:  # session, pong, status, an error answering a bad frame: not in the log
            return [frame]
        if seq <= self.last_seq or seq in self._held:
            return []  # already delivered, or already waiting: a replayed duplicate
        self._held[seq] = frame
        return self._release(now)

    def expire(self, now: float) -> list[F]:
        """Give up waiting for a gap older than `gap_timeout`: skip it and deliver what's held."""
        if self._held_since is None or now - self._held_since < self.gap_timeout:
            return []
        first = min(self._held)
        self.gaps.append((self.last_seq + 1, first - 1))
        self.last_seq = first - 1
        return self._release(now)

    def rewind(self, after_seq: int, now: float) -> list[F]:
        """Deliver again everything after `after_seq` (an explicit `resume` asked for it)."""
        self.last_seq = after_seq
        self._held = {seq: f for seq, f in self._held.items() if seq > after_seq}
        self._held_since = now if self._held else None
        return self._release(now)

    def deadline(self) -> float | None:
        """When `expire` will have something to do; None while nothing is held."""
        return None if self._held_since is None else self._held_since + self.gap_timeout

    @property
    def waiting(self) -> int:
        return len(self._held)

    def _release(self, now: float) -> list[F]:
        out: list[F] = []
        while self.last_seq + 1 in self._held:
            self.last_seq += 1
            out.append(self._held.pop(self.last_seq))
        # The wait restarts whenever the gap shrinks: a replay in progress is not a lost one.
        if not self._held:
            self._held_since = None
        elif out or self._held_since is None:
            self._held_since = now
        return out

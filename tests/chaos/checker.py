"""The invariants of a turn's life (DESIGN "A turn's life, and the faults it must survive"),
checked over what every client saw (`recorder`) and what the store holds afterwards.

`check` returns a `Report` of counts, each of which must be 0, and the details that explain
a count that is not; a test prints it (the figures of a run) and asserts `report.clean`.
"""

from __future__ import annotations

import json
import sqlite3
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from tests import pg
from tests.chaos.recorder import Frame, Sock, Talk, text_of
from tests.support import ServerProcess


@dataclass
class Stored:
    """What the store holds of some conversations: their events and turns."""

    events: dict[str, dict[int, tuple[str, str | None, Frame]]]  # conversation -> seq -> (type, turn, frame)
    turns: list[tuple[str, str, str, str, str | None]]  # id, conversation, message id, status, stop reason
    replies: dict[str, dict[str, str]]  # conversation -> assistant message id -> its stored text

    @classmethod
    def read(cls, rows_events: Iterable[tuple], rows_turns: Iterable[tuple],
             replies: dict[str, dict[str, str]]) -> Stored:
        events: dict[str, dict[int, tuple[str, str | None, Frame]]] = defaultdict(dict)
        for cid, seq, kind, turn_id, frame in rows_events:
            events[cid][int(seq)] = (kind, turn_id, json.loads(frame))
        return cls(dict(events), [tuple(row) for row in rows_turns], replies)  # type: ignore[misc]


_EVENTS = "SELECT conversation_id, seq, type, turn_id, frame FROM events ORDER BY conversation_id, seq"
_TURNS = "SELECT id, conversation_id, message_id, status, stop_reason FROM turns ORDER BY started_at"


def stored_pg(url: str, server: ServerProcess, owner_conversations: Iterable[str]) -> Stored:
    return Stored.read(pg.query(url, _EVENTS), pg.query(url, _TURNS), _replies(server, owner_conversations))


def stored_sqlite(path: Path, server: ServerProcess, owner_conversations: Iterable[str]) -> Stored:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10) as db:
        events, turns = db.execute(_EVENTS).fetchall(), db.execute(_TURNS).fetchall()
    return Stored.read(events, turns, _replies(server, owner_conversations))


def _replies(server: ServerProcess, conversations: Iterable[str]) -> dict[str, dict[str, str]]:
    """The assistant replies of the visible history, as the HTTP API gives them."""
    replies = {}
    for cid in conversations:
        status, body = server.get(f"/api/conversations/{cid}")
        assert status == 200, (cid, status, body)
        replies[cid] = {m["id"]: m["content"] for m in body["messages"] if m["role"] == "assistant"}
    return replies


@dataclass
class Report:
    sockets: int = 0
    frames: int = 0
    turns: int = 0
    # Each of these must be 0.
    frames_after_done: int = 0  # a client got a frame of a turn after that turn's `done`
    stored_after_done: int = 0  # the log holds a frame of a turn after that turn's `done`
    dup_done: int = 0  # a turn's `done` twice (on one socket, or in the log)
    seq_twice_or_backwards: int = 0  # a socket got a seq it had (or one older than it had)
    streamed_not_stored: int = 0  # a frame a client got that the log does not hold (as sent)
    replies_streamed_ne_stored: int = 0  # a reply's text as streamed is not the stored reply
    undelivered: int = 0  # stored frames a socket that stayed open never got (a gap not refilled)
    busy_without_turn: int = 0  # `busy` for a message sent after the client had seen every `done`
    stale_session: int = 0  # a reconnect's `session` older than what that client already had
    left_running: int = 0  # turns the store holds as running once everything is over
    log_holes: int = 0  # seqs missing between two the event log holds (none is ever skipped)
    restarts: int = 0  # a server process that died (nobody killed it)
    # Figures, not faults.
    closed_by_server: int = 0
    stops: Counter = field(default_factory=Counter)
    recovery: list[float] = field(default_factory=list)  # seconds until each conversation took a turn again
    details: list[str] = field(default_factory=list)

    FAULTS = ("frames_after_done", "stored_after_done", "dup_done", "seq_twice_or_backwards", "streamed_not_stored",
              "replies_streamed_ne_stored", "undelivered", "busy_without_turn", "stale_session", "left_running",
              "log_holes", "restarts")

    @property
    def clean(self) -> bool:
        return not any(getattr(self, name) for name in self.FAULTS)

    def fault(self, name: str, detail: str) -> None:
        setattr(self, name, getattr(self, name) + 1)
        if len(self.details) < 40:
            self.details.append(f"{name}: {detail}")

    def summary(self) -> str:
        faults = ", ".join(f"{name}={getattr(self, name)}" for name in self.FAULTS)
        recovery = (f"max {max(self.recovery):.1f} s over {len(self.recovery)} "
                    f"({' '.join(f'{r:.1f}' for r in sorted(self.recovery))})" if self.recovery else "-")
        lines = [f"sockets={self.sockets} frames={self.frames} turns={self.turns} closed_by_server="
                 f"{self.closed_by_server} stops={dict(self.stops)} recovery={recovery}", faults, *self.details]
        return "\n".join(lines)


def check(socks: list[Sock], stored: Stored, talks: Iterable[Talk] = (), servers: Iterable[ServerProcess] = (),
          killed: Iterable[ServerProcess] = ()) -> Report:
    report = Report(sockets=len(socks), frames=sum(len(s.frames) for s in socks))
    for sock in socks:
        _check_socket(report, sock, stored)
    _check_log(report, stored)
    _check_reconnects(report, socks)
    for talk in talks:
        for attempt in talk.attempts:
            if attempt.outcome == "refused" and attempt.code == "busy" and attempt.previous_done_seen:
                report.fault("busy_without_turn", f"{talk.sock.name}: {attempt.content!r}")
    report.turns = len(stored.turns)
    for turn_id, cid, message_id, status, stop in stored.turns:
        report.stops[f"{status}/{stop}"] += 1
        if status == "running":
            report.fault("left_running", f"{cid} turn {turn_id}")
    killed_procs = {id(s) for s in killed}
    for server in servers:
        if id(server) not in killed_procs and server.proc is not None and server.proc.poll() is not None:
            report.fault("restarts", f"server on port {server.port} exited with {server.proc.returncode}")
    return report


def _check_socket(report: Report, sock: Sock, stored: Stored) -> None:
    cid = sock.conversation
    log = stored.events.get(cid, {})
    oldest_kept = min(log, default=0)
    if sock.closed_by_server is not None:
        report.closed_by_server += 1
    done: dict[str, int] = {}  # messageId -> the seq of its `done`
    tool_turn: dict[str, str] = {}
    # A `resume` right after a reconnect may send what the `session` summed up after live frames
    # the socket already got (docs/protocol.md): each of the two runs must rise on its own, and
    # no seq comes twice; holes are checked from the session's seq on.
    summed_up = sock.session.get("seq") or 0
    last = {True: 0, False: 0}  # the last seq got, of the summed-up run and of the live one
    have: set[int] = set()
    for seen in sock.frames:
        frame = seen.frame
        seq = frame.get("seq")
        message_id = frame.get("messageId") or tool_turn.get(frame.get("toolId", ""))
        if frame["type"] == "tool_start":
            tool_turn[frame["toolId"]] = frame["messageId"]
        if message_id in done and (seq is None or seq > done[message_id]):
            report.fault("frames_after_done", f"{sock.name}: {frame['type']} seq={seq} of {message_id}")
        if frame["type"] == "done":
            if frame["messageId"] in done:
                report.fault("dup_done", f"{sock.name}: done of {frame['messageId']} again at seq {seq}")
            done[frame["messageId"]] = seq if seq is not None else 0
        if seq is None:
            continue
        run = seq <= summed_up
        if seq in have or seq <= last[run]:
            report.fault("seq_twice_or_backwards", f"{sock.name}: seq {seq} after {last[run]}")
            continue
        last[run] = seq
        have.add(seq)
        kept = log.get(seq)
        if kept is None:
            if seq >= oldest_kept:
                report.fault("streamed_not_stored", f"{sock.name}: seq {seq} {frame['type']} is not in the log")
        elif kept[2] != frame:
            report.fault("streamed_not_stored", f"{sock.name}: seq {seq} was sent as {_short(frame)}, stored as "
                                                f"{_short(kept[2])}")
    # Holes: a stored frame between two the socket got, or after the last one while it stayed open.
    end = max(log, default=0) if sock.open_ else max(have, default=0)  # (checked before sockets close)
    missing = [seq for seq in range(summed_up + 1, end + 1) if seq in log and seq not in have]
    if missing:
        report.undelivered += len(missing)
        report.details.append(f"undelivered: {sock.name} ({'open' if sock.closed_by_server is None else 'closed'}) "
                              f"never got {_ranges(missing)} of {cid[:8]} (last got {max(have, default=0)})")
    _check_replies(report, sock, stored)


def _check_replies(report: Report, sock: Sock, stored: Stored) -> None:
    # What the `session` summed up is in its partial reply; a `resume` may send it again.
    after = sock.session.get("seq") or 0
    frames = [s.frame for s in sock.frames if s.frame.get("seq", after + 1) > after]
    partial = {m["id"]: "".join(p.get("text", "") for p in m.get("parts", []) if p.get("type") == "text")
               for m in sock.session.get("messages", []) if m["role"] == "assistant" and m.get("status") == "streaming"}
    replies = stored.replies.get(sock.conversation, {})
    for frame in frames:
        if frame["type"] != "done":
            continue
        message_id = frame["messageId"]
        streamed = partial.get(message_id, "") + text_of(frames, message_id)
        kept = replies.get(message_id)
        if kept is None:
            if streamed:
                report.fault("replies_streamed_ne_stored", f"{sock.name}: reply {message_id} is not stored "
                                                           f"({len(streamed)} chars streamed)")
        elif kept != streamed:
            report.fault("replies_streamed_ne_stored", f"{sock.name}: reply {message_id}: streamed "
                                                       f"{len(streamed)} chars, stored {len(kept)} "
                                                       f"({_diff(streamed, kept)})")


def _check_log(report: Report, stored: Stored) -> None:
    for cid, log in stored.events.items():
        holes = [seq for seq in range(min(log), max(log)) if seq not in log]
        if holes:
            report.fault("log_holes", f"log of {cid[:8]} lacks {_ranges(holes)}")
        ended: dict[str, int] = {}
        messages_ended: dict[str, int] = {}
        for seq in sorted(log):
            kind, turn_id, frame = log[seq]
            message_id = frame.get("messageId")
            if (turn_id is not None and turn_id in ended) or (message_id is not None and message_id in messages_ended):
                if kind == "done":
                    report.fault("dup_done", f"log of {cid[:8]}: done at {seq} of an ended turn")
                else:
                    report.fault("stored_after_done", f"log of {cid[:8]}: {kind} at {seq} after its turn's done")
            if kind == "done":
                if turn_id is not None:
                    ended[turn_id] = seq
                if message_id is not None:
                    messages_ended[message_id] = seq


def _check_reconnects(report: Report, socks: list[Sock]) -> None:
    """A client that opens a socket on a conversation again (same name before the '#') must
    not be shown a `session` older than what it already got on the same instance."""
    by_client: dict[str, list[Sock]] = defaultdict(list)
    for sock in socks:
        by_client[sock.name.split("#")[0]].append(sock)
    for client, opened in by_client.items():
        opened.sort(key=lambda s: s.opened_at)
        for i, sock in enumerate(opened):
            before = [s for s in opened[:i] if s.instance == sock.instance]
            had = max((_had_at(s, sock.opened_at) for s in before), default=0)
            seq = sock.session.get("seq") or 0
            if seq < had:
                report.fault("stale_session", f"{sock.name}: session at seq {seq}, the client had {had}")
            done_seen = any(_done_by(s, sock.opened_at) for s in before)
            if sock.session.get("running") and done_seen and seq <= had:
                report.fault("stale_session", f"{sock.name}: session says running at seq {seq}, the client had "
                                              f"the done at {had}")


def _had_at(sock: Sock, at: float) -> int:
    seqs = [s.frame["seq"] for s in sock.frames if "seq" in s.frame and s.at <= at]
    return max(seqs, default=sock.session.get("seq") or 0)


def _done_by(sock: Sock, at: float) -> bool:
    """Whether the last frame with a seq the socket got by `at` was a `done`."""
    framed = [s.frame for s in sock.frames if "seq" in s.frame and s.at <= at]
    return bool(framed) and framed[-1]["type"] == "done"


def _short(frame: Frame) -> str:
    text = json.dumps({k: v for k, v in frame.items() if k != "conversationId"})
    return text if len(text) < 120 else text[:117] + "..."


def _diff(a: str, b: str) -> str:
    n = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return f"first difference at {n}: {a[n:n + 30]!r} / {b[n:n + 30]!r}"


def _ranges(seqs: list[int]) -> str:
    out, start, prev = [], seqs[0], seqs[0]
    for seq in seqs[1:] + [None]:  # type: ignore[list-item]
        if seq is not None and seq == prev + 1:
            prev = seq
            continue
        out.append(f"{start}" if start == prev else f"{start}-{prev}")
        if seq is not None:
            start = prev = seq
    return ",".join(out)


def any_server(servers: list[ServerProcess]) -> ServerProcess:
    """One server still running, to read the HTTP API from."""
    return next(s for s in servers if s.proc is not None and s.proc.poll() is None)

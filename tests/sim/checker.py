"""The invariants of a turn's life (DESIGN "A turn's life, and the faults it must survive"),
checked against what every client was sent and what the store ever committed.

On every connection:
- seqs only go up (no seq twice, none out of order);
- a frame with a seq was stored before it was sent, unless the instance sending it was
  waiting for an unavailable store then (it streams from memory: DESIGN), and every frame a
  client got is in the store in the end, as it was sent;
- nothing of a turn comes after its `done`, and no turn has two;
- no stored frame is missing between the connection's `session` and its last frame (and,
  for a socket still open at the end, up to the conversation's last frame);
- a `session` is never older than what the same client was sent on that instance before;
- each reply streamed to the end (its `done` came) is the reply the history keeps.
In the store: seqs without holes, nothing of a turn after its `done`, exactly one `done`
per turn, no turn closed as "not saved" unless a write of it was lost; once the faults are over, no turn left running, no conversation busy or running
in any instance's memory, and every conversation answers a new message (the probe).

Frames an instance streamed from memory while the store was unavailable are lost for good
when that instance dies or stalls past its lease, or its lease is taken, before the store
is back: the documented price of streaming from memory. A conversation where that
happened ("lossy") is not held to the storage invariants; the others still apply.

So is, for now, one where a commit went in but its answer was lost (in doubt) while the
instance streamed from memory: the writer tries the batch again, the store refuses it as a
duplicate, and everything queued behind it (frames clients were shown) is lost with it. A
known limitation of the writer (its retries are not idempotent), left open.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from chat_agent.protocol import VisibleMessage
from chat_agent.sessions.cut import NOT_SAVED
from tests.sim.model import RECORDED
from tests.sim.world import at_once

if TYPE_CHECKING:
    from tests.sim.run import Simulation

OWNER = "local"


def _visible(sim: Simulation, conversation_id: str) -> dict[str, VisibleMessage]:
    items = at_once(sim.db.load_history(OWNER, conversation_id, "visible"))
    return {item.data["id"]: VisibleMessage.model_validate(item.data) for item in items}


def lossy_conversations(sim: Simulation) -> set[str]:
    """Conversations where frames streamed from memory were lost with their instance or lease."""
    stolen = {cid for _, cid in sim.steals}
    lossy: set[str] = set()
    for conn in sim.connections:
        cid = conn.conversation_id
        if cid is None or cid in lossy:
            continue
        for frame in conn.frames:
            if frame.seq is None or frame.stored or not frame.unavailable:
                continue
            if sim.shadow.stored(cid, frame.seq, frame.text):
                continue
            if cid in stolen or conn.node in sim.disrupted:
                lossy.add(cid)
                break
    return lossy


def check(sim: Simulation) -> list[str]:
    found: list[str] = []
    shadow = sim.shadow
    lossy = lossy_conversations(sim)
    sim.stats_lossy = len(lossy)  # type: ignore[attr-defined]
    visible = {slot.id: _visible(sim, slot.id) for slot in sim.slots if slot.id is not None}

    # ---- each connection ----------------------------------------------------------------------
    held: dict[tuple[str, str], int] = {}  # (client, instance) -> newest seq it was sent there
    for conn in sim.connections:
        where = f"conn {conn.id} ({conn.client.name} on {conn.node})"
        cid = conn.conversation_id or ""
        events = shadow.events.get(cid, {})
        key = (conn.client.name, conn.node)
        if conn.session is not None and cid not in lossy:
            seq = conn.session.get("seq") or 0
            if seq < held.get(key, 0):
                found.append(f"{where}: its session is at seq {seq}, but this client was sent seq {held[key]} "
                             "on this instance before")
        previous, got = None, set()
        for frame in conn.frames:
            if frame.seq is None:
                continue
            if frame.seq in got:
                found.append(f"{where}: seq {frame.seq} twice (t={frame.t:.3f})")
            elif previous is not None and frame.seq < previous and not (
                    conn.resume_after is not None and frame.seq > conn.resume_after):
                # (Older frames a `resume` asked for may follow live ones the connection got
                # before the resume was read: the contract replays every frame past afterSeq.)
                found.append(f"{where}: seq {frame.seq} after seq {previous} (t={frame.t:.3f})")
            got.add(frame.seq)
            previous = max(previous or 0, frame.seq)
            if not frame.stored and not frame.unavailable:
                found.append(f"{where}: seq {frame.seq} ({frame.type}) was sent before it was stored "
                             f"(t={frame.t:.3f}), with the store available")
            if cid not in lossy and not shadow.stored(cid, frame.seq, frame.text):
                stored = events.get(frame.seq)
                found.append(f"{where}: seq {frame.seq} ({frame.type}) was sent but "
                             + ("never stored" if stored is None else f"the store holds another frame there "
                                                                     f"({stored.type})"))
        found += [f"{where}: {line}" for line in conn.after_done]
        found += [f"{where}: {n} done frames for message {mid}" for mid, n in conn.dones.items() if n > 1]
        if conn.session is not None:
            held[key] = max(held.get(key, 0), conn.last_seq)
            if cid not in lossy:
                found += _holes(conn, where, events, sim)
                found += _replies(conn, where, visible.get(cid, {}))

    # ---- the store ----------------------------------------------------------------------------
    for cid, events in shadow.events.items():
        if cid in shadow.deleted:
            continue
        seqs = sorted(events)
        if seqs and seqs[-1] - seqs[0] + 1 != len(seqs):
            missing = sorted(set(range(seqs[0], seqs[-1] + 1)) - set(seqs))
            found.append(f"store {cid[:8]}: seqs {missing[:5]} were never stored, but later ones were")
        done_at: dict[str, int] = {}  # message id -> seq of its done
        turn_done: dict[str, int] = {}
        for seq in seqs:
            event = events[seq]
            data = json.loads(event.frame)
            message_id = data.get("messageId")
            if event.turn_id is not None and event.turn_id in turn_done:
                found.append(f"store {cid[:8]}: seq {seq} ({event.type}) of turn {event.turn_id} stored after its "
                             f"done (seq {turn_done[event.turn_id]})")
            elif message_id is not None and message_id in done_at:
                found.append(f"store {cid[:8]}: seq {seq} ({event.type}) of message {message_id} stored after "
                             f"its done (seq {done_at[message_id]})")
            if event.type == "done":
                if event.turn_id is not None:
                    turn_done.setdefault(event.turn_id, seq)
                if message_id is not None:
                    done_at.setdefault(message_id, seq)
    for turn_id, (cid, message_id, _) in shadow.turns.items():
        if cid in shadow.deleted:
            continue
        dones = [e.seq for e in shadow.events.get(cid, {}).values() if e.type == "done" and e.turn_id == turn_id]
        if len(dones) != 1:
            found.append(f"store {cid[:8]}: turn {turn_id} has {len(dones)} done frames (seqs {dones})")
        finished = shadow.finished.get(turn_id, [])
        if len(finished) > 1:
            found.append(f"store {cid[:8]}: turn {turn_id} was finished {len(finished)} times")
    if not sim.plan.store_faults:
        # With a store that never failed, a cut turn goes on (or ends) as cut by a death, a
        # stall or a restart: "could not save" is only said where the writer lost writes (a
        # write another instance's refused, say).
        for cid, events in shadow.events.items():
            if any("could not store" in line and cid in line for line in sim.errors):
                continue
            found += [f"store {cid[:8]}: seq {seq} says a reply could not be saved, and no write was lost"
                      for seq, event in sorted(events.items())
                      if event.type == "error" and NOT_SAVED.message in event.frame]
    for turn in at_once(sim.db.running_turns()):
        found.append(f"store {turn.conversation_id[:8]}: turn {turn.id} still running at the end")

    # ---- tools that must not run twice (a continued turn runs only repeatable ones again) -------
    found += [f"record call {ref} ran {n} times" for ref, n in RECORDED.items() if n > 1]

    # ---- the instances, once the faults are over ------------------------------------------------
    for node in sim.reachable_nodes():
        assert node.hub is not None
        for live in node.hub.registry.all():
            if live.busy or live.running:
                state = "busy" if live.busy else "running (following)"
                found.append(f"{node.name}: conversation {live.id[:8]} is still {state} at the end "
                             f"(turn {live.turn.state.value if live.turn else None})")
    for probe in sim.probes:
        if not probe.answered:
            found.append(f"conversation {probe.slot.id}: no answer to a new message within the probe's time, "
                         f"{probe.attempts} attempt(s), after the faults were over")
    found += [f"unhandled: {line}" for line in sim.world.unhandled_errors]
    found += [f"the endpoint failed (1011): {line}" for line in sim.endpoint_errors]
    return found


def _holes(conn: Any, where: str, events: dict[int, Any], sim: Simulation) -> list[str]:
    """Stored frames a connection should have had and did not get."""
    # From the session's seq, or the seq the client said it held (`resume`): it already had those.
    start = max(conn.session.get("seq") or 0, conn.resume_after or 0)
    got = {f.seq for f in conn.frames if f.seq is not None}
    end = max(got, default=start)
    if conn.open:  # still open at the end: everything stored since it opened
        end = max(events, default=end)
    missing = [seq for seq in events if start < seq <= end and seq not in got]
    if not missing:
        return []
    return [f"{where}: never got seqs {sorted(missing)[:6]} (stored) between its session (seq {start}) and "
            f"seq {end}" + (", open to the end" if conn.open else "")]


def _replies(conn: Any, where: str, stored: dict[str, VisibleMessage]) -> list[str]:
    """Each reply whose `done` the connection got, against the one the history keeps."""
    found = []
    for message_id, reply in conn.replies.items():
        if not conn.dones.get(message_id):
            continue
        kept = stored.get(message_id)
        streamed = [part.model_dump() for part in reply.parts]
        if kept is None:
            if streamed:
                found.append(f"{where}: reply {message_id} was streamed to its done but is not in the history")
            continue
        if [part.model_dump() for part in kept.parts] != streamed:
            found.append(f"{where}: reply {message_id} as streamed differs from the history's:\n"
                         f"      streamed {_short(reply)}\n      stored   {_short(kept)}")
    return found


def _short(message: VisibleMessage) -> str:
    return json.dumps([part.model_dump(exclude_none=True) for part in message.parts])[:300]

"""A conversation as the store holds it, for an instance that does not own it: the `session`
frame of a socket on another instance than the one running the turn, and the reply of a
turn rebuilt from its committed frames (also how a cut turn is closed, see `cut`).

Frames reach clients only once committed, so the event log is exactly what every client
was told: a reply folded from it up to a seq is what a client that saw those frames holds.
"""

from __future__ import annotations

from chat_agent.canvas.artifact import artifact_state
from chat_agent.protocol import (ApprovalInfo, ContentChunk, ContextInfo, ContextUpdate, SessionFrame, ToolInfo, VisibleMessage,
                                 server_frames)
from chat_agent.sessions.fold import fold, track_approvals
from chat_agent.sessions.pages import SESSION_BYTES, SESSION_MESSAGES, newest_within, visible_page
from chat_agent.store import Store, TurnRecord

ATTEMPTS = 20  # snapshots read again when the owner committed while one was being read


async def reply_from_log(store: Store, turn: TurnRecord, upto: int | None = None,
                         pending: dict[str, ApprovalInfo] | None = None) -> tuple[VisibleMessage, str]:
    """The turn's reply as its frames (up to seq `upto`) built it, and the text streamed by
    the model call that had not completed (its reply was not in the history yet). Fills
    `pending` with the approval requests not answered by then."""
    events = await store.events_after(turn.owner, turn.conversation_id, turn.first_seq - 1)
    reply = VisibleMessage(id=turn.message_id, role="assistant", created_at=turn.started_at, status="streaming")
    unfinished: list[str] = []
    for event in events:
        if upto is not None and event.seq > upto:
            break
        if event.turn_id != turn.id:
            continue
        frame = server_frames.validate_json(event.frame)
        fold(reply, frame)
        if pending is not None:
            track_approvals(pending, frame)
        if isinstance(frame, ContentChunk):
            unfinished.append(frame.content)
        elif isinstance(frame, ContextUpdate):  # sent once a call's reply is in the history
            unfinished.clear()
    return reply, "".join(unfinished)


async def session_from_store(store: Store, owner: str, conversation_id: str, tools: list[ToolInfo],
                             max_tokens: int) -> SessionFrame | None:
    """The `session` frame as of the conversation's last committed seq: the running turn's
    reply exactly as its frames up to that seq built it, so that the frames after it, which
    the socket gets next, continue it without a gap or a repeat. The artifact, the title and
    the context size may already be newer (those frames only ever set state again). None
    when the conversation does not exist for this owner."""
    for _ in range(ATTEMPTS):
        record = await store.get_conversation(owner, conversation_id)
        if record is None:
            return None
        seq = record.last_seq
        size = await store.history_size(owner, conversation_id, "model")
        artifact = await store.get_artifact(owner, conversation_id)
        turns = await store.running_turns(conversation_id)
        pending: dict[str, ApprovalInfo] = {}
        reply = (await reply_from_log(store, turns[-1], upto=seq, pending=pending))[0] if turns else None
        page = await store.history_page(owner, conversation_id, "visible", None,
                                        SESSION_MESSAGES - (reply is not None))
        if page is None:
            return None
        if reply is not None and any(item.id == reply.id for item in page.items):
            continue  # the turn ended meanwhile: its reply is stored, read it all again
        # The reads are not one snapshot of the store: what the owner committed meanwhile (a
        # reply finished and stored in the history, say) would show ahead of `seq`.
        again = await store.get_conversation(owner, conversation_id)
        if again is None:
            return None
        if again.last_seq != seq:
            continue
        frame = SessionFrame(conversation_id=conversation_id, seq=seq, title=record.title,
                             artifact=artifact_state(artifact), tools=tools, running=bool(turns),
                             context=ContextInfo(tokens=size.tokens + record.context_overhead, max_tokens=max_tokens),
                             pending_approvals=list(pending.values()))
        budget = SESSION_BYTES - (len(reply.model_dump_json()) if reply is not None else 0)
        frame.messages, frame.more_before = visible_page(newest_within(page, budget), reply)
        return frame
    raise RuntimeError(f"could not read a consistent session of {conversation_id}")

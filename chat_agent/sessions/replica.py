"""A conversation as the store holds it, for an instance that does not own it: the `session`
frame of a socket on another instance than the one running the turn, and the reply of a
turn rebuilt from its committed frames (also how a cut turn is closed, see `cut`).

Frames reach clients only once committed, so the event log is exactly what every client
was told: a reply folded from it up to a seq is what a client that saw those frames holds.
"""

from __future__ import annotations

from chat_agent.canvas.artifact import artifact_state
from chat_agent.protocol import (ApprovalInfo, ReviewInfo, ContentChunk, ContextInfo, ContextUpdate, SessionFrame, ToolInfo, VisibleMessage,
                                 server_frames)
from chat_agent.sessions.fold import fold, track_approvals, track_reviews
from chat_agent.sessions.pages import SESSION_BYTES, SESSION_MESSAGES, newest_within, visible_page
from chat_agent.sessions.plan import latest_plan
from chat_agent.store import EventRecord, HistoryPage, Store, TurnRecord

async def reply_from_log(store: Store, turn: TurnRecord, upto: int | None = None,
                         pending: dict[str, ApprovalInfo] | None = None,
                         reviews: dict[str, ReviewInfo] | None = None) -> tuple[VisibleMessage, str]:
    """The turn's reply as its frames (up to seq `upto`) built it, and the text streamed by
    the model call that had not completed (its reply was not in the history yet). Fills
    `pending` with the approval requests not answered by then, `reviews` with the reviews
    still waiting for a decision."""
    events = await store.events_after(turn.owner, turn.conversation_id, turn.first_seq - 1)
    return fold_reply(turn, events, upto, pending, reviews)


def fold_reply(turn: TurnRecord, events: list[EventRecord], upto: int | None = None,
               pending: dict[str, ApprovalInfo] | None = None,
               reviews: dict[str, ReviewInfo] | None = None) -> tuple[VisibleMessage, str]:
    """`reply_from_log` over events already read."""
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
        if reviews is not None:
            track_reviews(reviews, frame)
        if isinstance(frame, ContentChunk):
            unfinished.append(frame.content)
        elif isinstance(frame, ContextUpdate):  # sent once a call's reply is in the history
            unfinished.clear()
    return reply, "".join(unfinished)


async def session_from_store(store: Store, owner: str, conversation_id: str, tools: list[ToolInfo],
                             max_tokens: int) -> SessionFrame | None:
    """The `session` frame as of the conversation's last committed seq: the running turn's
    reply exactly as its frames up to that seq built it, so that the frames after it, which
    the socket gets next, continue it without a gap or a repeat (one snapshot of the store:
    the owner commits while it is read). The artifact and the context size may already be
    newer (those frames only ever set state again). None when the conversation does not
    exist for this owner."""
    view = await store.live_view(owner, conversation_id, SESSION_MESSAGES)
    if view is None:
        return None
    record = view.record
    pending: dict[str, ApprovalInfo] = {}
    reviews: dict[str, ReviewInfo] = {}
    reply = fold_reply(view.turns[-1], view.events, record.last_seq, pending, reviews)[0] if view.turns else None
    page = view.page
    if reply is not None:  # the reply is shown whole as the turn's, not as a history item too
        items = [item for item in page.items if item.id != reply.id]
        page = HistoryPage(items[-(SESSION_MESSAGES - 1):], page.more or len(items) >= SESSION_MESSAGES,
                           page.places)
    size = await store.history_size(owner, conversation_id, "model")
    artifact = await store.get_artifact(owner, conversation_id)
    frame = SessionFrame(conversation_id=conversation_id, seq=record.last_seq, title=record.title,
                         artifact=artifact_state(artifact), tools=tools, running=bool(view.turns),
                         context=ContextInfo(tokens=size.tokens + record.context_overhead, max_tokens=max_tokens),
                         pending_approvals=list(pending.values()), pending_reviews=list(reviews.values()),
                         leaf_id=record.leaf_id)
    budget = SESSION_BYTES - (len(reply.model_dump_json()) if reply is not None else 0)
    frame.messages, frame.more_before = visible_page(newest_within(page, budget), reply)
    frame.plan = latest_plan(frame.messages)
    return frame

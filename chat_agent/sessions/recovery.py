"""Start-up: turns that were running when the process died are closed as interrupted.

What the user saw of such a turn is rebuilt from the event log (the frames were committed
before any client got them), the model-facing history is made valid again, and the
conversation's listeners get the ending they missed: open tool cards closed, an `error`,
and `done`, through the same `finish` a running turn ends with.
"""

from __future__ import annotations

import logging

from chat_agent.protocol import ContentChunk, ContextUpdate, ErrorFrame, Usage, VisibleMessage, server_frames
from chat_agent.sessions.fold import fold
from chat_agent.sessions.hub import Hub
from chat_agent.store import TurnRecord

log = logging.getLogger(__name__)

INTERRUPTED_NOTE = "[This reply was interrupted by a server restart.]"
INTERRUPTED_RESULT = "Interrupted: the server restarted before this tool finished."


async def recover(hub: Hub) -> int:
    turns = await hub.store.running_turns()
    for record in turns:
        try:
            await _recover_turn(hub, record)
        except Exception:
            log.exception("could not recover turn %s of %s", record.id, record.conversation_id)
    await hub.writer.flush()
    if turns:
        log.warning("closed %d turn(s) interrupted by the last shutdown", len(turns))
    return len(turns)


async def _recover_turn(hub: Hub, record: TurnRecord) -> None:
    live = await hub.open(record.owner, record.conversation_id)
    if live is None:
        return
    events = await hub.store.events_after(record.owner, record.conversation_id, record.first_seq - 1)
    reply = VisibleMessage(id=record.message_id, role="assistant", created_at=record.started_at, status="streaming")
    unfinished: list[str] = []  # text of the model call that never completed
    for event in events:
        if event.turn_id != record.id:
            continue
        frame = server_frames.validate_json(event.frame)
        fold(reply, frame)
        if isinstance(frame, ContentChunk):
            unfinished.append(frame.content)
        elif isinstance(frame, ContextUpdate):  # sent once a call's reply is in the history
            unfinished.clear()
    live.manager.repair("".join(unfinished), INTERRUPTED_NOTE, INTERRUPTED_RESULT)
    live.adopt(record, reply)
    live.publish(ErrorFrame(code="internal", message="The server restarted while this reply was being "
                                                     "written; it stopped here."))
    live.finish("error", Usage(), status="interrupted")
    hub.release(live)

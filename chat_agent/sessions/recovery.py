"""Start-up: turns that were running when the process died are closed as interrupted.

Opening a conversation closes the turns its store holds as running (see `cut`), so recovery
is opening each conversation that has one.
"""

from __future__ import annotations

import logging

from chat_agent.sessions.cut import RESTARTED
from chat_agent.sessions.hub import Hub

log = logging.getLogger(__name__)


async def recover(hub: Hub) -> int:
    turns = await hub.store.running_turns()
    for owner, conversation_id in dict.fromkeys((t.owner, t.conversation_id) for t in turns):
        try:
            live = await hub.open(owner, conversation_id, cut=RESTARTED)
            if live is not None:
                hub.release(live)
        except Exception:
            log.exception("could not recover the turn(s) of %s", conversation_id)
    await hub.writer.flush()
    if turns:
        log.warning("closed %d turn(s) interrupted by the last shutdown", len(turns))
    return len(turns)

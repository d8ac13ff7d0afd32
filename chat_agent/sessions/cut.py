"""Closing a turn the store still holds as running although nothing runs it: the process died
during it (start-up recovery), its instance stopped renewing its lease, or its writes could
not be stored (the writer lost them).

Such a turn continues where it can (`Resumer`, sessions/continuation.py); else it is closed.
What the user saw of such a turn is rebuilt from the event log (frames reach clients only
once committed), the model-facing history is made valid again, and the conversation's
listeners get the ending they missed: open tool cards closed, an `error`, and `done`,
through the same `finish` a running turn ends with.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol

from chat_agent.protocol import ApprovalInfo, MessageStatus, ReviewInfo
from chat_agent.sessions.live import LiveConversation
from chat_agent.sessions.replica import reply_from_log
from chat_agent.sessions.turn import RunningTurn
from chat_agent.store import Store, TurnRecord


# Whether `live` is the copy of its conversation this process holds, held again if it was let
# go meanwhile (`Registry.keep`): a copy let go while a cut turn's reads were awaited, and
# replaced by a new copy since, must leave the turn to that copy.
Keep = Callable[[LiveConversation], bool]


class Resumer(Protocol):
    async def resume(self, live: LiveConversation, record: TurnRecord, keep: Keep) -> RunningTurn | None: ...


@dataclass(frozen=True, slots=True)
class Cut:
    """Why a turn was cut, as the model (its history) and the user (an `error`) are told."""

    note: str  # ends the reply in the model-facing history
    result: str  # the result of a tool call that never finished
    message: str  # the `error` frame's message
    status: MessageStatus  # of the reply and of the stored turn
    continues: bool = True  # whether the turn may go on instead (sessions/continuation.py)


RESTARTED = Cut(
    note="[This reply was interrupted by a server restart.]",
    result="Interrupted: the server restarted before this tool finished.",
    message="The server restarted while this reply was being written; it stopped here.",
    status="interrupted",
)
OWNER_LOST = Cut(
    note="[This reply was interrupted: the server instance writing it stopped.]",
    result="Interrupted: the server instance running this tool stopped before it finished.",
    message="The server instance writing this reply stopped; it stopped here.",
    status="interrupted",
)
NOT_SAVED = Cut(
    note="[This reply was cut off: the server could not save it.]",
    result="Cut off: the server could not save this tool's result.",
    message="The server could not save this reply (its storage failed), so it stopped here.",
    status="error",
    # Its clients may have been shown what the store lost: going on from the store would
    # contradict them.
    continues=False,
)


async def end_cut_turn(live: LiveConversation, store: Store, record: TurnRecord, cut: Cut,
                       resumer: Resumer | None, keep: Keep) -> RunningTurn | bool:
    """Continues the turn here (the turn, running again) or closes it (True); False when it
    is not cut off after all (it runs or ended here: the store is behind), or another turn
    runs here now."""
    if live.knows_turn(record.id) or live.turn is not None:
        return False
    if resumer is not None and cut.continues:
        resumed = await resumer.resume(live, record, keep)
        if resumed is not None:
            return resumed
    return await close_cut_turn(live, store, record, cut, keep)


async def close_cut_turn(live: LiveConversation, store: Store, record: TurnRecord, cut: Cut, keep: Keep) -> bool:
    """Closes the turn; False when it is not cut off after all (it runs or ended here: the
    store is behind), or another turn runs here now."""
    if live.knows_turn(record.id) or live.turn is not None:
        return False
    pending: dict[str, ApprovalInfo] = {}
    reviews: dict[str, ReviewInfo] = {}
    reply, unfinished = await reply_from_log(store, record, pending=pending, reviews=reviews)
    await live.load()  # the model-facing history, let go again once the turn is over
    # Checked after the reads, with nothing awaited from here on: two closers (a takeover and
    # the opening it started, say), nor two copies of the conversation, must not both close it.
    if live.knows_turn(record.id) or live.turn is not None or not keep(live):
        return False
    live.manager.begin_reply(record.message_id)  # what the repair adds is that reply's
    live.manager.repair(unfinished, cut.note, cut.result)
    RunningTurn.adopt(live, record, reply, pending, reviews).close_cut(cut.message, cut.status)
    return True

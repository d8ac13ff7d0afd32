"""Pages of the visible history as clients get them (PROTOCOL 1.1 paging): stored items made
messages, the running turn's reply last, and `moreBefore`."""

from __future__ import annotations

import json

from chat_agent.protocol import BranchPlace, VisibleMessage
from chat_agent.store import HistoryItem, HistoryPage

SESSION_MESSAGES = 50  # the newest messages a `session` frame carries at most
# ...and at most about this many characters of them (JSON), the newest message always: a page
# of long replies with tool output would otherwise make `session` large again.
SESSION_BYTES = 48_000


def newest_within(page: HistoryPage, budget: int) -> HistoryPage:
    """The newest items of the page whose JSON fits `budget` characters (at least one)."""
    kept: list[HistoryItem] = []
    size = 0
    for item in reversed(page.items):
        size += len(json.dumps(item.data, ensure_ascii=False, separators=(",", ":")))
        if kept and size > budget:
            return HistoryPage(kept[::-1], more=True, places=page.places)
        kept.append(item)
    return page


def visible_page(page: HistoryPage, reply: VisibleMessage | None) -> tuple[list[VisibleMessage], str | None]:
    """The page's messages, then the running reply; and the oldest one's id when older exist."""
    messages = [placed(VisibleMessage.model_validate(item.data), page) for item in page.items]
    if reply is not None:
        messages.append(reply)
    return messages, (messages[0].id if page.more and messages else None)


def placed(message: VisibleMessage, page: HistoryPage) -> VisibleMessage:
    """The message with its parent and branch place as the tree has them now (a stored message
    does not know of the siblings added after it)."""
    place = page.places.get(message.id)
    if place is not None:
        message.parent_id, message.branch = place[0], BranchPlace(index=place[1], count=place[2])
    return message

"""Conversation ids for names a client chose (AG-UI's `threadId`): each user's names are their
own. A thread id that is one of the caller's conversations (one started over the WebSocket, say)
is that conversation; any other name is the caller's thread of that name, whose id is derived
from the user and the name. So a name taken by one user is free for every other (no squatting,
and nothing answers "exists, but not yours"), and a user's thread keeps its id on any instance
without a table of names."""

from __future__ import annotations

import hashlib

from chat_agent.store import Store


def thread_conversation_id(owner: str, thread_id: str) -> str:
    return hashlib.sha256(f"ag-ui-thread\0{owner}\0{thread_id}".encode()).hexdigest()[:32]


async def conversation_for_thread(store: Store, owner: str, thread_id: str) -> str:
    if await store.get_conversation(owner, thread_id) is not None:
        return thread_id
    return thread_conversation_id(owner, thread_id)

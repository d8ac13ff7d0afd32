"""PROTOCOL 1.2 trees on a live conversation: where `regenerate`, `message.editOf` and
`switch_branch` move the active path, and what everyone on the conversation is told of it.

A move makes the path through the chosen point active (the model-facing history in hand is
another path's, so it is read again), brings back the artifact version of that point as the
current one (versions stay append-only: only the current index moves), and publishes
`history` (the new path as `session` would send it), then the artifact when it changed.
"""

from __future__ import annotations

from chat_agent.protocol import ContextUpdate, HistoryFrame, MessageIn, RegenerateIn
from chat_agent.rejection import FrameRejected
from chat_agent.sessions.live import LiveConversation
from chat_agent.sessions.pages import SESSION_MESSAGES
from chat_agent.store import Store, StoreWriter
from chat_agent.store.tree import Tree


class Branches:
    def __init__(self, store: Store, writer: StoreWriter):
        self._store = store
        self._writer = writer

    async def regenerate(self, live: LiveConversation, frame: RegenerateIn) -> None:
        """Moves the active path to the user message that the reply `frame.messageId` (default:
        the last one of the active path) answered: the new reply will be its sibling."""
        tree = await self._tree(live)
        target = frame.message_id
        if target is None:
            target = next((id for id in reversed(tree.path(live.manager.leaf))
                           if tree.nodes[id].role == "assistant"), None)
            if target is None:
                raise FrameRejected("not_found", "There is no reply to regenerate in this conversation.")
        node = tree.nodes.get(target)
        if node is None or node.role != "assistant" or node.parent_id is None:
            raise FrameRejected("not_found", f"No reply {target!r} in this conversation.")
        await self._move(live, tree, node.parent_id)

    async def edit(self, live: LiveConversation, message: MessageIn) -> None:
        """Moves the active path to the parent of the user message `editOf`: the new message
        will be its sibling."""
        assert message.edit_of is not None
        tree = await self._tree(live)
        node = tree.nodes.get(message.edit_of)
        if node is None or node.role != "user":
            raise FrameRejected("not_found", f"No user message {message.edit_of!r} in this conversation.")
        await self._move(live, tree, node.parent_id)

    async def switch(self, live: LiveConversation, message_id: str) -> None:
        """Makes the path through `message_id`, down to its most recent leaf, the active one."""
        if live.busy:
            raise FrameRejected("busy", "A turn is running in this conversation; wait for done or abort it.")
        tree = await self._tree(live)
        if message_id not in tree.nodes:
            raise FrameRejected("not_found", f"No message {message_id!r} in this conversation.")
        await self._move(live, tree, tree.latest_leaf(message_id))
        # The context size is the new path's: read, told, and the history let go again.
        await live.load()
        if not live.busy:
            live.manager.release()
        live.publish(ContextUpdate(tokens=live.manager.tokens, max_tokens=live.manager.max_tokens))

    async def _tree(self, live: LiveConversation) -> Tree:
        await self._writer.flush()  # a message stored a moment ago is part of the tree
        tree = await self._store.tree(live.owner, live.id)
        if tree is None:
            raise FrameRejected("not_found", "No such conversation.")
        return tree

    async def _move(self, live: LiveConversation, tree: Tree, leaf: str | None) -> None:
        live.manager.move_to(leaf)
        restored = await self._restore_artifact(live, tree, leaf)
        page = await live.page(None, SESSION_MESSAGES)
        messages, more_before = page if page is not None else ([], None)
        live.publish(HistoryFrame(leaf_id=leaf, messages=messages, more_before=more_before))
        if restored:
            live.announce_canvas()

    async def _restore_artifact(self, live: LiveConversation, tree: Tree, leaf: str | None) -> bool:
        """Makes the version current when the path's last reply ended current again; whether it
        changed. A path without a reply that recorded one (before the first, or one stored
        before trees) leaves the artifact as it is."""
        canvas = live.canvas
        if leaf is None or canvas.current is None:
            return False
        reply = next((id for id in reversed(tree.path(leaf)) if tree.nodes[id].role == "assistant"), None)
        if reply is None:
            return False
        page = await self._store.history_page(live.owner, live.id, "visible", None, 1, leaf=reply)
        index = page.items[-1].data.get("artifactIndex") if page is not None and page.items else None
        if not isinstance(index, int) or index == canvas.current_index or not 1 <= index <= canvas.version_count:
            return False
        version = await self._store.get_artifact_version(live.owner, live.id, index)
        if version is None:
            return False
        canvas.select(index, version)
        return True

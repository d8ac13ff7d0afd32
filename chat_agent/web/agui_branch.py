"""AG-UI runs on a tree (PROTOCOL 1.2 trees): an AG-UI client sends its whole history with each
run, and when that history leaves the stored active path (the user edited an earlier message,
or went back to an earlier reply), the new message starts a branch from where the client's
history and the tree last agree, like `message.editOf` or a `switch_branch` would.

The client knows the server's replies by the ids the run gave them (the reply's id, then
`id.2`, `id.3`… for later parts): the last of its assistant messages that the tree knows is
the point it continues from. A history that names none of them (a client that keeps no
history, a thread's first run) continues the active path, as before trees.
"""

from __future__ import annotations

from dataclasses import dataclass

from ag_ui.core import RunAgentInput

from chat_agent.store import Store
from chat_agent.store.tree import Tree


@dataclass(frozen=True, slots=True)
class BranchPoint:
    edit_of: str | None = None  # the new message is a sibling of this user message
    switch_to: str | None = None  # or: the path through this reply becomes active first


def _known_reply(tree: Tree, message_id: str) -> str | None:
    for candidate in (message_id, message_id.rsplit(".", 1)[0]):
        node = tree.nodes.get(candidate)
        if node is not None and node.role == "assistant":
            return candidate
    return None


async def branch_point(store: Store, owner: str, conversation_id: str, run_input: RunAgentInput) -> BranchPoint:
    tree = await store.tree(owner, conversation_id)
    if tree is None or not tree.nodes:
        return BranchPoint()
    point = None
    for message in reversed(run_input.messages[:-1]):
        if message.role == "assistant" and (point := _known_reply(tree, message.id)) is not None:
            break
    if point is None or point == tree.leaf:
        return BranchPoint()
    answers = [child for child in tree.children.get(point, []) if tree.nodes[child].role == "user"]
    return BranchPoint(edit_of=answers[-1]) if answers else BranchPoint(switch_to=point)

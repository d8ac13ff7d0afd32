"""Where an AI SDK request goes in the conversation's tree (PROTOCOL 1.2 trees). `useChat` sends
its whole history; its replies carry the ids the server gave them (the reply's `messageId`),
its user messages ids of its own. The last reply of the history that the tree knows is the
point the client continues from:

- a new message after it starts a branch there when it is not the end of the active path (as
  `message.editOf`, or a `switch_branch` to it when nothing answered it yet); `messageId` set
  (useChat's edit of a user message) makes the new message a sibling of the one that answered
  that point even when the point is the root;
- `regenerate-message` answers again the user message after that point: `messageId` when it
  names a reply, else that user message's latest reply.
A history that names no reply of the server's continues the active path.
"""

from __future__ import annotations

from chat_agent.protocol import RegenerateIn
from chat_agent.store import Store
from chat_agent.store.tree import Tree
from chat_agent.web.agui_branch import BranchPoint
from chat_agent.web.aisdk_request import ChatRequest


def _point(tree: Tree, request: ChatRequest) -> str | None:
    for message in reversed(request.messages[:-1]):
        node = tree.nodes.get(message.id)
        if message.role == "assistant" and node is not None and node.role == "assistant":
            return message.id
    return None


def _answers(tree: Tree, point: str | None) -> list[str]:
    """The user messages that follow `point` (None: the first messages), the active path's last."""
    answers = [child for child in tree.children.get(point, []) if tree.nodes[child].role == "user"]
    on_path = set(tree.path())
    return sorted(answers, key=lambda id: id in on_path)


async def branch_point(store: Store, owner: str, conversation_id: str, request: ChatRequest) -> BranchPoint:
    tree = await store.tree(owner, conversation_id)
    if tree is None or not tree.nodes:
        return BranchPoint()
    point = _point(tree, request)
    if request.message_id is not None:  # an edit of the user message after the point
        answers = _answers(tree, point)
        if answers:
            return BranchPoint(edit_of=answers[-1])
    if point is None or point == tree.leaf:
        return BranchPoint()
    answers = _answers(tree, point)
    return BranchPoint(edit_of=answers[-1]) if answers else BranchPoint(switch_to=point)


async def regenerate(store: Store, owner: str, conversation_id: str, request: ChatRequest) -> RegenerateIn:
    settings = {"settings": request.settings} if request.settings else {}
    tree = await store.tree(owner, conversation_id)
    target = request.message_id
    if tree is not None and (target is None or target not in tree.nodes or tree.nodes[target].role != "assistant"):
        target = None
        answers = _answers(tree, _point(tree, request))
        if answers:
            replies = [child for child in tree.children.get(answers[-1], []) if tree.nodes[child].role == "assistant"]
            target = replies[-1] if replies else None
    return RegenerateIn.model_validate({"type": "regenerate", "messageId": target, **settings})

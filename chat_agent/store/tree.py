"""Conversations as trees: the active path, branch places, and each path's model-facing history.

The visible history is one append-only list of every message of every branch; each names its
parent (`parent_id`), and the conversation names the last message of its active path
(`leaf_id`). Paths are walked here, in memory, from light rows (no message is parsed): a
conversation of 1,000 messages reads 1,000 short rows to find its path.

The model-facing history is one append-only list too. Each item names the visible message
it belongs to (`node`); a path's history is the items of the messages on that path, minus
those that an item on it replaces (`supersedes`: a summary replaces the older items, a user
message merged into the tool results an aborted turn left replaces that item). A summary
belongs to the newest message it covers, so it is used on every path through that message,
which is exactly the paths that share everything it covers. Messages of a path that have no
model-facing items (a conversation imported, or a branch of one made before trees) are read
as their visible text; a refused exchange is not.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Container, Iterable, Mapping, Sequence

from chat_agent.store.records import HistoryItem, HistorySize

ROOT = ""  # the stored parent of a first message (NULL: the message before it, see Tree)
ACTIVE = None  # `leaf` of a path read: the active path
EMPTY = ROOT  # `leaf` of a path read: the empty path (before the first message)


@dataclass(slots=True)
class TreeNode:
    id: str
    parent_id: str | None
    role: str | None
    pos: int
    chars: int


class Tree:
    """The visible messages' tree and the active leaf, from TREE_ROWS and LEAF."""

    def __init__(self, rows: Iterable[Sequence[Any]], leaf: str | None):
        self.nodes: dict[str, TreeNode] = {}
        self.children: dict[str | None, list[str]] = {}
        previous: str | None = None
        for id, parent_id, role, pos, chars in rows:
            # ROOT marks a first message; no parent at all, a message written without the
            # tree in mind, which follows the one before it.
            parent = None if parent_id == ROOT else previous if parent_id is None else parent_id
            self.nodes[id] = TreeNode(id, parent, role, int(pos), int(chars))
            previous = id
        for node in self.nodes.values():  # rows come in position order: children too
            self.children.setdefault(node.parent_id, []).append(node.id)
        # A leaf that is not a message (none stored yet) falls back on the newest message; EMPTY
        # is the path moved before the first message (an edit of it, about to be sent again).
        self.leaf = None if leaf == EMPTY else leaf if leaf in self.nodes else (
            next(reversed(self.nodes)) if self.nodes else None)

    def path(self, leaf: str | None = None) -> list[str]:
        """Message ids from the root down to `leaf` (the active leaf by default)."""
        at = self.leaf if leaf is None else leaf
        path: list[str] = []
        seen: set[str] = set()
        while at is not None and at in self.nodes and at not in seen:
            seen.add(at)
            path.append(at)
            at = self.nodes[at].parent_id
        path.reverse()
        return path

    def branch(self, id: str) -> tuple[int, int]:
        """The message's 1-based place among those that share its parent and role, and their count."""
        node = self.nodes[id]
        siblings = [s for s in self.children.get(node.parent_id, []) if self.nodes[s].role == node.role]
        return siblings.index(id) + 1, len(siblings)

    def latest_leaf(self, id: str) -> str:
        """The most recent message with no children at or below `id`: where a switch to it lands."""
        best: str | None = None
        stack = [id]
        while stack:
            at = stack.pop()
            kids = self.children.get(at, [])
            if not kids and (best is None or self.nodes[at].pos > self.nodes[best].pos):
                best = at
            stack.extend(kids)
        return best or id

    def page(self, path: list[str], before: str | None, limit: int) -> tuple[list[str], bool] | None:
        """At most `limit` ids of `path` just before `before` (the newest when None), and whether
        older ones exist; None when `before` is not on the path."""
        end = len(path)
        if before is not None:
            if before not in path:
                return None
            end = path.index(before)
        start = max(0, end - limit)
        return path[start:end], start > 0


class Links:
    """Each visible message's parent, from LINK_ROWS and LEAF: the tree's paths without the
    rest of it, all that a model-facing history read needs. The rows become a dict in C: a
    path of 2,000 messages is read in a fraction of what Tree's per-message objects cost.
    `nodes` maps each message to its stored parent (ROOT for a first message)."""

    def __init__(self, rows: Sequence[Sequence[Any]], leaf: str | None):
        self.nodes: dict[str, str | None] = dict(rows)  # type: ignore[arg-type]
        if None in self.nodes.values():  # written without the tree in mind: it follows the one before it
            previous: str | None = ROOT
            for id, parent_id in rows:
                if parent_id is None:
                    self.nodes[id] = previous
                previous = id
        self.leaf = None if leaf == EMPTY else leaf if leaf in self.nodes else (
            next(reversed(self.nodes)) if self.nodes else None)

    def path(self, leaf: str | None = None) -> list[str]:
        """Message ids from the root down to `leaf` (the active leaf by default), as Tree.path."""
        at = self.leaf if leaf is None else leaf
        nodes = self.nodes
        path: list[str] = []
        seen: set[str] = set()
        while at is not None and at in nodes and at not in seen:
            seen.add(at)
            path.append(at)
            at = nodes[at]
        path.reverse()
        return path


def place(tree: Tree, id: str) -> tuple[str | None, int, int]:
    """A visible message's parent, and its place among its siblings with their count."""
    return (tree.nodes[id].parent_id, *tree.branch(id))


@dataclass(slots=True)
class ModelRow:
    id: str
    tokens: int
    chars: int
    node: str | None
    supersedes: tuple[str, ...]
    pos: int
    base: bool  # a summary: see plan_model


def model_rows(rows: Iterable[Sequence[Any]]) -> list[ModelRow]:
    return [ModelRow(id, int(tokens), int(chars), node, tuple(json.loads(sup)) if sup else (), int(pos), bool(base))
            for id, tokens, chars, node, sup, pos, base in rows]


@dataclass(slots=True)
class ModelPlan:
    """A path's model-facing history, in order: ("model", item id) or ("visible", message id),
    the latter to be read as the message's text."""

    entries: list[tuple[str, str]]
    size: HistorySize
    rows: dict[str, ModelRow]  # the model-facing items' rows read for it, by id


def plan_model(nodes: Container[str], path: list[str], rows: list[ModelRow], active: bool = True) -> ModelPlan:
    """`nodes`: the visible messages' ids. `active`: `path` is the active path, whose running
    reply (not a visible message until it ends, or until a cut turn is closed) owns the items
    of no message yet. The plan's size counts its model-facing items; `size` adds the
    messages read as their text."""
    depth = {id: n for n, id in enumerate(path)}
    by_id = {row.id: row for row in rows}
    running = {row.node for row in rows if active and row.node is not None and row.node not in nodes}
    for node in running:
        depth[node] = len(path)  # after the whole path
    included = [row for row in rows if row.node is None or row.node in depth]
    # A summary (`base`) stands for everything its path held up to its message, which is the
    # message of the newest item it replaced: what messages before that one have is not in
    # the history, and none is read as its text. So a read may stop at the newest summary of
    # the path (tree_reads.py): nothing before it changes the plan.
    floor = max((depth[row.node] for row in included if row.base and row.node is not None), default=-1)
    if floor > 0:
        included = [row for row in included if row.node is None or depth[row.node] >= floor]
    # An item may name messages among what it replaces: it stands for them (the history from
    # before trees stands for every message of the path it was written on).
    covered = {row.node for row in included} | {old for row in included for old in row.supersedes
                                                if old in nodes} | set(path[:floor + 1])
    covered -= running
    if None in covered:  # items written without the tree in mind: they are every path's history
        covered = set(path)
    replaced = {old for row in included for old in row.supersedes}
    keys: dict[str, tuple[int, int]] = {}

    # An item of no message (written without the tree in mind) stands after what was written
    # before it.
    after: dict[str, int] = {}
    if any(row.node is None for row in rows):
        last = -1
        for row in rows:
            if row.node in depth:
                last = max(last, depth[row.node])
            after[row.id] = last

    def own(row: ModelRow) -> tuple[int, int]:
        # A summary stands first of all: it replaced the start of the history.
        return (-1 if row.base else depth[row.node] if row.node in depth else after[row.id], row.pos)

    def key(row: ModelRow) -> tuple[int, int]:
        # An item that replaces others stands where the first of them stood.
        if row.id not in keys:
            keys[row.id] = own(row)  # a guard against cycles
            keys[row.id] = min([keys[row.id], *(key(by_id[old]) for old in row.supersedes if old in by_id)])
        return keys[row.id]

    ordered: list[tuple[int, int, int, str, str]] = []
    tokens = chars = 0
    for row in included:
        if row.id not in replaced:
            ordered.append((*(key(row) if row.supersedes else own(row)), 0, "model", row.id))
            tokens, chars = tokens + row.tokens, chars + row.chars
    for id in path:
        if id not in covered:
            ordered.append((depth[id], -1, 0, "visible", id))
    ordered.sort(key=lambda entry: entry[:3])  # stable: items in a tie stay in the order written
    entries = [(kind, id) for *_, kind, id in ordered]
    return ModelPlan(entries, HistorySize(len(entries), tokens, chars), by_id)


def size(plan: ModelPlan, chars: Mapping[str, int]) -> HistorySize:
    """The plan's size with its messages read as their text (`chars`: theirs) counted in."""
    shown = [chars.get(id, 0) for kind, id in plan.entries if kind == "visible"]
    return HistorySize(plan.size.count, plan.size.tokens + sum(synthetic_tokens(n) for n in shown),
                       plan.size.chars + sum(shown))


def synthetic_tokens(chars: int) -> int:
    return chars // 4 + 4  # an estimate: the API's count replaces it after the next call


def model_items(plan: ModelPlan, model: dict[str, HistoryItem], visible: dict[str, HistoryItem],
                parents: dict[str, str | None]) -> list[HistoryItem]:
    """The plan's items: stored ones as they are, messages without any as their text (a refused
    reply and the message it refused left out), roles kept alternating."""
    items: list[HistoryItem] = []
    refused = {parents.get(id) for id, message in visible.items() if message.data.get("status") == "refusal"}
    for kind, id in plan.entries:
        if kind == "model":
            if id in model:
                items.append(model[id])
            continue
        message = visible.get(id)
        if message is None or message.data.get("status") == "refusal" or id in refused:
            continue
        role = message.data.get("role", "user")
        text = _text(message.data) or ("(no text)" if role == "assistant" else "(empty message)")
        block = {"type": "text", "text": text}
        if items and items[-1].data.get("role") == role:
            last = items[-1]
            merged = {"role": role, "content": [*_blocks(last.data["content"]), block]}
            items[-1] = HistoryItem(last.id, merged, last.tokens + synthetic_tokens(len(text)),
                                    last.chars + len(text), node=last.node, supersedes=last.supersedes,
                                    base=last.base)
            continue
        items.append(HistoryItem(f"v:{id}", {"role": role, "content": [block]}, synthetic_tokens(len(text)),
                                 len(text), node=id))
    return items


def _blocks(content: Any) -> list[dict[str, Any]]:
    return [{"type": "text", "text": content}] if isinstance(content, str) else list(content)


def _text(data: dict[str, Any]) -> str:
    parts = data.get("parts")
    if isinstance(parts, list):
        texts = [p.get("text", "") for p in parts if isinstance(p, dict) and p.get("type") == "text"]
        return "\n\n".join(t for t in texts if t)
    content = data.get("content")
    return content if isinstance(content, str) else ""

"""The reads of tree.py's paths, as generators that both backends drive inside one read
transaction (SQLite in its thread, PostgreSQL on its connection): they yield (sql, params)
and are sent the rows back."""

from __future__ import annotations

from typing import Any, Awaitable, Callable, Generator, Iterable, Mapping, Sequence, TypeVar

from chat_agent.store.reads import item, stored_item
from chat_agent.store.records import HistoryItem, HistoryPage, HistorySize
from chat_agent.store.tree import (ACTIVE, EMPTY, Links, ModelPlan, Tree, model_items, model_rows, place,
                                   plan_model, size)

_OWNED_ROWS = " FROM history_items h JOIN conversations c ON c.id = h.conversation_id WHERE c.id = ? AND c.owner = ?"
TREE_ROWS = f"SELECT h.id, h.parent_id, h.role, h.pos, h.chars{_OWNED_ROWS} AND h.history = 'visible' ORDER BY h.pos"
LINK_ROWS = f"SELECT h.id, h.parent_id{_OWNED_ROWS} AND h.history = 'visible' ORDER BY h.pos"
_MODEL_COLUMNS = "h.id, h.tokens, h.chars, h.node, h.supersedes, h.pos, h.base"
MODEL_ROWS = f"SELECT {_MODEL_COLUMNS}{_OWNED_ROWS} AND h.history = 'model' ORDER BY h.pos"
# A path read from its newest summary on (see _plan_since); these take a conversation whose
# owner was checked already. The newest summary of a visible message, and where it stands:
# each summary's message looked up by its id. (Written as a join, or with `history =
# 'visible'` in the text, PostgreSQL without statistics yet scanned the partial index of the
# messages' positions for that id: 7 ms at 1,000 turns. The history is a parameter here, which
# that index cannot serve in a prepared statement's plan.)
NEWEST_BASE = (
    "SELECT node, at FROM (SELECT h.node AS node, (SELECT v.pos FROM history_items v"
    " WHERE v.conversation_id = h.conversation_id AND v.history = ? AND v.id = h.node) AS at"
    " FROM history_items h WHERE h.conversation_id = ? AND h.history = 'model' AND h.base = TRUE) b"
    " WHERE at IS NOT NULL ORDER BY at DESC LIMIT 1"
)
LINKS_FROM = ("SELECT h.id, h.parent_id FROM history_items h"
              " WHERE h.conversation_id = ? AND h.history = 'visible' AND h.pos >= ? ORDER BY h.pos")
FIRST_OF_NODE = "SELECT MIN(h.pos) FROM history_items h WHERE h.conversation_id = ? AND h.history = 'model' AND h.node = ?"
MODEL_FROM = (f"SELECT {_MODEL_COLUMNS} FROM history_items h"
              " WHERE h.conversation_id = ? AND h.history = 'model' AND h.pos >= ? AND h.node IS NOT NULL")
# The messages' JSON of the items from a position on, in order: when most of them are wanted,
# one range read of the table beats looking each up by id (300k characters: 0.25 ms, not 0.9).
MODEL_DATA_FROM = ("SELECT h.id, h.data FROM history_items h"
                   " WHERE h.conversation_id = ? AND h.history = 'model' AND h.pos >= ? ORDER BY h.pos")
MODEL_UNTIED = (f"SELECT {_MODEL_COLUMNS} FROM history_items h"
                " WHERE h.conversation_id = ? AND h.history = 'model' AND h.node IS NULL")
LEAF = "SELECT leaf_id FROM conversations WHERE id = ? AND owner = ?"
CHUNK = 500  # ids per `IN (...)` read


def chars_by_id(count: int) -> str:
    """Visible messages' sizes by id (the caller has checked the owner already)."""
    marks = ", ".join("?" * count)
    return ("SELECT h.id, h.chars FROM history_items h"
            f" WHERE h.conversation_id = ? AND h.history = 'visible' AND h.id IN ({marks})")


def items_by_id(count: int) -> str:
    """Items of one history by id (the caller has checked the owner already)."""
    marks = ", ".join("?" * count)
    return ("SELECT h.id, h.data, h.tokens, h.chars, h.parent_id, h.node, h.supersedes FROM history_items h"
            f" WHERE h.conversation_id = ? AND h.history = ? AND h.id IN ({marks})")


def chunks(ids: Sequence[str]) -> Iterable[Sequence[str]]:
    for start in range(0, len(ids), CHUNK):
        yield ids[start:start + CHUNK]


T = TypeVar("T")
Reads = Generator[tuple[str, Sequence[Any]], list[Any], T]


def read_tree(owner: str, conversation_id: str) -> Reads[Tree | None]:
    """The tree; None when the conversation does not exist for `owner`."""
    found = yield LEAF, (conversation_id, owner)
    if not found:
        return None
    rows = yield TREE_ROWS, (conversation_id, owner)
    return Tree(rows, found[0][0])


def read_links(owner: str, conversation_id: str) -> Reads[Links | None]:
    """The tree's paths; None when the conversation does not exist for `owner`."""
    found = yield LEAF, (conversation_id, owner)
    if not found:
        return None
    return Links((yield LINK_ROWS, (conversation_id, owner)), found[0][0])


def read_items(conversation_id: str, history: str, ids: Sequence[str]) -> Reads[dict[str, HistoryItem]]:
    found: dict[str, HistoryItem] = {}
    for chunk in chunks(ids):
        for row in (yield items_by_id(len(chunk)), (conversation_id, history, *chunk)):
            got = item(row)
            found[got.id] = got
    return found


def read_page(owner: str, conversation_id: str, before: str | None, limit: int,
              leaf: str | None = ACTIVE) -> Reads[HistoryPage | None]:
    """A page of the path that ends at `leaf`; None when `before` is not on it, or `leaf` is
    not a message of the conversation."""
    tree = yield from read_tree(owner, conversation_id)
    if tree is None:
        return None if before is not None else HistoryPage([], False)
    if leaf is not None and leaf not in tree.nodes:
        return None
    found = tree.page(tree.path(leaf), before, limit)
    if found is None:
        return None
    ids, more = found
    items = yield from read_items(conversation_id, "visible", ids)
    return HistoryPage([items[id] for id in ids if id in items], more, {id: place(tree, id) for id in ids})


def read_model(owner: str, conversation_id: str, leaf: str | None = ACTIVE) -> Reads[list[HistoryItem]]:
    """The model-facing history of the path that ends at `leaf`."""
    planned = yield from read_plan(owner, conversation_id, leaf)
    if planned is None:
        return []
    parents, plan, since = planned
    model = yield from _read_model_items(conversation_id, plan, since)
    visible = yield from read_items(conversation_id, "visible",
                                    [id for kind, id in plan.entries if kind == "visible"])
    return model_items(plan, model, visible, {id: parents[id] for id in visible})


def _read_model_items(conversation_id: str, plan: ModelPlan, since: int) -> Reads[dict[str, HistoryItem]]:
    """The plan's model-facing items; `since`: the position its items (but those of no
    message) were read from."""
    wanted = [id for kind, id in plan.entries if kind == "model"]
    later = {id for id in wanted if plan.rows[id].pos >= since}
    found: dict[str, HistoryItem] = {}
    if later and 2 * len(later) >= sum(1 for row in plan.rows.values() if row.pos >= since):
        for id, data in (yield MODEL_DATA_FROM, (conversation_id, since)):
            if id in later:
                row = plan.rows[id]
                found[id] = stored_item(id, data, row.tokens, row.chars, None, row.node, row.supersedes, row.base)
    rest = yield from read_items(conversation_id, "model", [id for id in wanted if id not in found])
    return found | rest


def read_model_size(owner: str, conversation_id: str) -> Reads[HistorySize]:
    planned = yield from read_plan(owner, conversation_id)
    if planned is None:
        return HistorySize()
    plan = planned[1]
    shown = [id for kind, id in plan.entries if kind == "visible"]
    chars: dict[str, int] = {}
    for chunk in chunks(shown):
        chars.update((id, int(n)) for id, n in (yield chars_by_id(len(chunk)), (conversation_id, *chunk)))
    return size(plan, chars)


def read_plan(owner: str, conversation_id: str,
              leaf: str | None = ACTIVE) -> Reads[tuple[Mapping[str, str | None], ModelPlan, int] | None]:
    """The plan of the path that ends at `leaf`, the parents of (at least) its messages, and
    the position from which its items were read (those of no message: all); None when the
    conversation does not exist for `owner`. Read from the path's newest summary on when
    there is one (what a turn reads stays as long as what a summary keeps, however long the
    conversation), else from the whole tree."""
    found = yield LEAF, (conversation_id, owner)
    if not found:
        return None
    stored = found[0][0]
    base = yield NEWEST_BASE, ("visible", conversation_id)
    if base:
        planned = yield from _plan_since(conversation_id, stored, leaf, base[0][0], base[0][1])
        if planned is not None:
            return planned
    links = Links((yield LINK_ROWS, (conversation_id, owner)), stored)
    rows = model_rows((yield MODEL_ROWS, (conversation_id, owner)))
    return links.nodes, plan_model(links.nodes, links.path(leaf), rows, active=leaf is None or leaf == links.leaf), 0


def _plan_since(conversation_id: str, stored: str | None, leaf: str | None, base: str,
                at: int) -> Reads[tuple[Mapping[str, str | None], ModelPlan, int] | None]:
    """The plan read from the message of the conversation's newest summary (`base`, at
    position `at`) on, when the path goes through it; None otherwise (a path that left it
    before it: the whole tree is read). A message's children come after it, so the path from
    there is among the messages from there on; the items of the path's messages were written
    once its first message had its own, and nothing before that changes the plan (see
    plan_model); items of no message are every path's, read whatever their place."""
    links = Links((yield LINKS_FROM, (conversation_id, at)), stored)
    if (stored is not None and stored != EMPTY and stored not in links.nodes) or (
            leaf is not None and leaf not in links.nodes):
        return None  # a leaf before that message: Links would take the newest for it
    path = links.path(leaf)
    if not path or path[0] != base:
        return None
    first = (yield FIRST_OF_NODE, (conversation_id, base))[0][0]
    rows = model_rows([*(yield MODEL_FROM, (conversation_id, first)), *(yield MODEL_UNTIED, (conversation_id,))])
    rows.sort(key=lambda row: row.pos)
    # Which of the other messages these items belong to exist (another branch's) and which
    # do not (a reply still running).
    nodes = set(links.nodes)
    unknown = list({row.node for row in rows if row.node is not None and row.node not in nodes})
    for chunk in chunks(unknown):
        nodes.update(id for id, _ in (yield chars_by_id(len(chunk)), (conversation_id, *chunk)))
    return links.nodes, plan_model(nodes, path, rows, active=leaf is None or leaf == links.leaf), first


def run_sync(reads: Reads[T], execute: Callable[[str, Sequence[Any]], list[Any]]) -> T:
    try:
        sql, params = next(reads)
        while True:
            sql, params = reads.send(execute(sql, params))
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]


async def run_async(reads: Reads[T], execute: Callable[[str, Sequence[Any]], Awaitable[list[Any]]]) -> T:
    try:
        sql, params = next(reads)
        while True:
            sql, params = reads.send(await execute(sql, params))
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]

"""The reads of tree.py's paths, as generators that both backends drive inside one read
transaction (SQLite in its thread, PostgreSQL on its connection): they yield (sql, params)
and are sent the rows back."""

from __future__ import annotations

from typing import Any, Awaitable, Callable, Generator, Iterable, Sequence, TypeVar

from chat_agent.store.reads import item
from chat_agent.store.records import HistoryItem, HistoryPage, HistorySize
from chat_agent.store.tree import ACTIVE, Links, Tree, model_items, model_rows, place, plan_model, size

_OWNED_ROWS = " FROM history_items h JOIN conversations c ON c.id = h.conversation_id WHERE c.id = ? AND c.owner = ?"
TREE_ROWS = f"SELECT h.id, h.parent_id, h.role, h.pos, h.chars{_OWNED_ROWS} AND h.history = 'visible' ORDER BY h.pos"
LINK_ROWS = f"SELECT h.id, h.parent_id{_OWNED_ROWS} AND h.history = 'visible' ORDER BY h.pos"
MODEL_ROWS = (f"SELECT h.id, h.tokens, h.chars, h.node, h.supersedes, h.pos{_OWNED_ROWS} AND h.history = 'model'"
              " ORDER BY h.pos")
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
    links = yield from read_links(owner, conversation_id)
    if links is None:
        return []
    plan = plan_model(links.nodes, links.path(leaf), model_rows((yield MODEL_ROWS, (conversation_id, owner))),
                      active=leaf is None or leaf == links.leaf)
    model = yield from read_items(conversation_id, "model", [id for kind, id in plan.entries if kind == "model"])
    visible = yield from read_items(conversation_id, "visible",
                                    [id for kind, id in plan.entries if kind == "visible"])
    return model_items(plan, model, visible, {id: links.nodes[id] for id in visible})


def read_model_size(owner: str, conversation_id: str) -> Reads[HistorySize]:
    links = yield from read_links(owner, conversation_id)
    if links is None:
        return HistorySize()
    plan = plan_model(links.nodes, links.path(), model_rows((yield MODEL_ROWS, (conversation_id, owner))))
    shown = [id for kind, id in plan.entries if kind == "visible"]
    chars: dict[str, int] = {}
    for chunk in chunks(shown):
        chars.update((id, int(n)) for id, n in (yield chars_by_id(len(chunk)), (conversation_id, *chunk)))
    return size(plan, chars)


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

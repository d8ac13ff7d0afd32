"""The store's trees (PROTOCOL 1.2): a database written by the release before trees (schema 9)
upgrades with every conversation a single path and nothing lost, on SQLite and PostgreSQL;
paths, branch places and each path's model-facing history (summaries and merged items
included) read back as tree.py says."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any, Sequence

import psycopg
import pytest

from chat_agent.store import (AppendHistory, DeleteHistoryItems, HistoryItem, PostgresStore, SetLeaf, SqliteStore,
                              Store, pg_schema, schema)
from chat_agent.store import CreateConversation
from chat_agent.store import tree_reads as trees
from chat_agent.store.tree import EMPTY, ROOT
from tests import pg

OWNER = "u"
BEFORE_TREES = 9  # the schema version of the release before trees

VISIBLE = [("u1", "user", "First question"), ("a1", "assistant", "First answer"),
           ("u2", "user", "Second question"), ("a2", "assistant", "Second answer")]


def visible_data(id: str, role: str, text: str) -> str:
    return json.dumps({"id": id, "role": role, "createdAt": 1.0, "status": "complete",
                       "parts": [{"type": "text", "text": text}]})


def model_rows() -> list[tuple[str, str]]:
    """A summary of the first exchange, then the second exchange verbatim."""
    return [("s", json.dumps({"role": "user", "content": [{"type": "text", "text": "Summary: first Q and A."},
                                                          {"type": "text", "text": "Second question"}]})),
            ("m2", json.dumps({"role": "assistant", "content": [{"type": "text", "text": "Second answer"}]}))]


# Rows as the release before trees wrote them, in SQL both backends take ($n placeholders
# are turned into ? for SQLite below).
ROWS = [
    ("INSERT INTO conversations (id, owner, title, created_at, updated_at, last_seq) VALUES ($1, $2, 'Old', 1, 2, 0)",
     ("c1", OWNER)),
    ("INSERT INTO conversations (id, owner, title, created_at, updated_at, last_seq) VALUES ($1, $2, NULL, 1, 1, 0)",
     ("empty", OWNER)),
    *[("INSERT INTO history_items (conversation_id, history, pos, id, data, tokens, chars)"
       " VALUES ('c1', 'visible', $1, $2, $3, 0, $4)", (n, id, visible_data(id, role, text), len(text)))
      for n, (id, role, text) in enumerate(VISIBLE)],
    *[("INSERT INTO history_items (conversation_id, history, pos, id, data, tokens, chars)"
       " VALUES ('c1', 'model', $1, $2, $3, 5, 20)", (n, id, data)) for n, (id, data) in enumerate(model_rows())],
]


def _sqlite(sql: str) -> str:
    import re
    return re.sub(r"\$(\d+)", r"?\1", sql)


async def old_sqlite(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with monkeypatch.context() as old:
        old.setattr(schema, "MIGRATIONS", schema.MIGRATIONS[:BEFORE_TREES])
        old.setattr(schema, "SCHEMA_VERSION", BEFORE_TREES)
        async with SqliteStore(path):
            pass
    with sqlite3.connect(path) as db:
        for sql, params in ROWS:
            db.execute(_sqlite(sql), params)
        assert "parent_id" not in {r[1] for r in db.execute("PRAGMA table_info(history_items)")}


async def old_postgres(url: str) -> None:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await pg_schema.migrate(conn, BEFORE_TREES)
    for sql, params in ROWS:
        pg.query(url, sql, params)


async def check_upgraded(store: Store) -> None:
    record = await store.get_conversation(OWNER, "c1")
    assert record is not None and record.leaf_id == "a2" and record.title == "Old"
    assert (await store.get_conversation(OWNER, "empty")).leaf_id is None  # type: ignore[union-attr]
    tree = await store.tree(OWNER, "c1")
    assert tree is not None and tree.path() == ["u1", "a1", "u2", "a2"]
    assert [tree.nodes[id].parent_id for id in tree.path()] == [None, "u1", "a1", "u2"]
    page = await store.history_page(OWNER, "c1", "visible", None, 50)
    assert page is not None and [i.id for i in page.items] == ["u1", "a1", "u2", "a2"]
    assert page.places["u2"] == ("a1", 1, 1)
    # nothing lost: the messages as they were, the model-facing history (with its summary) too
    assert [i.data["parts"][0]["text"] for i in page.items] == [text for _, _, text in VISIBLE]
    model = await store.load_history(OWNER, "c1", "model")
    assert [i.id for i in model] == ["s", "m2"] and model[0].data == json.loads(model_rows()[0][1])
    size = await store.history_size(OWNER, "c1", "model")
    assert (size.count, size.tokens, size.chars) == (2, 10, 40)

    # a branch from the old path: the model-facing history of a1's path is read from the
    # messages' text (the stored one belongs to a2's path only)
    branch = await store.load_history(OWNER, "c1", "model", "a1")
    assert [(i.data["role"], i.data["content"][0]["text"]) for i in branch] == [
        ("user", "First question"), ("assistant", "First answer")]
    assert await store.load_history(OWNER, "c1", "model", EMPTY) == []

    # new messages on a new branch: u2b answers a1 like u2; the leaf moves to it
    item = HistoryItem("u2b", json.loads(visible_data("u2b", "user", "Other second")), 0, 12, parent_id="a1")
    model_item = HistoryItem("m3", {"role": "user", "content": [{"type": "text", "text": "Other second"}]}, 4, 12,
                             node="u2b")
    await store.apply([AppendHistory(OWNER, "c1", "visible", (item,)),
                       AppendHistory(OWNER, "c1", "model", (model_item,)), SetLeaf(OWNER, "c1", "u2b")])
    page = await store.history_page(OWNER, "c1", "visible", None, 50)
    assert [i.id for i in page.items] == ["u1", "a1", "u2b"] and page.places["u2b"] == ("a1", 2, 2)
    assert [i.id for i in await store.load_history(OWNER, "c1", "model")] == ["v:u1", "v:a1", "m3"]
    old = await store.history_page(OWNER, "c1", "visible", None, 50, leaf="a2")
    assert [i.id for i in old.items] == ["u1", "a1", "u2", "a2"] and old.places["u2"] == ("a1", 1, 2)
    assert [i.id for i in await store.load_history(OWNER, "c1", "model", "a2")] == ["s", "m2"]
    assert await store.history_page(OWNER, "c1", "visible", None, 50, leaf="nope") is None
    assert await store.history_page(OWNER, "c1", "visible", "a2", 50) is None  # not on the active path
    assert await store.tree("someone else", "c1") is None


async def test_a_sqlite_database_before_trees_upgrades_to_single_paths(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "old.db"
    await old_sqlite(path, monkeypatch)
    async with SqliteStore(path) as store:
        await check_upgraded(store)
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT MAX(version) FROM schema_version").fetchone() == (schema.SCHEMA_VERSION,)


async def test_a_postgres_database_before_trees_upgrades_to_single_paths(pg_url: str) -> None:
    await old_postgres(pg_url)
    async with PostgresStore(pg_url) as store:
        await check_upgraded(store)


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
async def test_summaries_and_merged_items_belong_to_their_paths(tmp_path: Path, backend: str, request) -> None:
    """a1 has two replies' worth of branches: a summary made on one path (covering u1..a1) is
    used by every path through a1; an item that replaces another (a user message merged into
    what an aborted reply left) only on its own path, where it stands in the old one's place."""
    store: Store = (SqliteStore(tmp_path / "t.db") if backend == "sqlite"
                    else PostgresStore(request.getfixturevalue("pg_url")))
    async with store:
        def v(id: str, role: str, parent: str | None, status: str = "complete") -> HistoryItem:
            return HistoryItem(id, {"id": id, "role": role, "createdAt": 1.0, "status": status}, 0, 1,
                               parent_id=ROOT if parent is None else parent)

        def m(id: str, role: str, node: str, text: str, supersedes: tuple[str, ...] = ()) -> HistoryItem:
            return HistoryItem(id, {"role": role, "content": [{"type": "text", "text": text}]}, 1, len(text),
                               node=node, supersedes=supersedes)

        await store.apply([CreateConversation(OWNER, "c", 1.0),
                           AppendHistory(OWNER, "c", "visible", (v("u1", "user", None), v("a1", "assistant", "u1"),
                                                                 v("u2", "user", "a1"), v("a2", "assistant", "u2", "refusal"),
                                                                 v("u3", "user", "a1"))),
                           AppendHistory(OWNER, "c", "model", (
                               m("x1", "user", "u1", "q1"), m("x2", "assistant", "a1", "tool call"),
                               m("x3", "user", "a1", "tool results"), m("x4", "user", "u2", "results+q2", ("x3",)),
                               m("x5", "assistant", "a2", "answer 2"),
                               m("s", "user", "a1", "summary", ("x1", "x2", "x3")),
                               m("x6", "user", "u3", "q3"))),
                           SetLeaf(OWNER, "c", "a2")])
        texts = [i.data["content"][0]["text"] for i in await store.load_history(OWNER, "c", "model")]
        assert texts == ["summary", "results+q2", "answer 2"]
        texts = [i.data["content"][0]["text"] for i in await store.load_history(OWNER, "c", "model", "u3")]
        assert texts == ["summary", "q3"]
        texts = [i.data["content"][0]["text"] for i in await store.load_history(OWNER, "c", "model", "u1")]
        assert texts == ["q1"]
        # the refused exchange taken out (as the turn does): not read from the messages either
        await store.apply([DeleteHistoryItems(OWNER, "c", "model", ("x4", "x5"))])
        texts = [i.data["content"][0]["text"] for i in await store.load_history(OWNER, "c", "model")]
        assert texts == ["summary"]


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
async def test_a_path_is_read_from_its_newest_summary_on(tmp_path: Path, backend: str, request) -> None:
    """A summary (`base`) stands for everything its path held up to its message: a path
    through that message is read from there on (the same history as reading it all), a path
    that left before it is read whole, and a running reply's items still count."""
    store: Store = (SqliteStore(tmp_path / "t.db") if backend == "sqlite"
                    else PostgresStore(request.getfixturevalue("pg_url")))
    async with store:
        def v(id: str, role: str, parent: str | None) -> HistoryItem:
            return HistoryItem(id, {"id": id, "role": role, "createdAt": 1.0, "status": "complete"}, 0, 1,
                               parent_id=ROOT if parent is None else parent)

        def m(id: str, role: str, node: str | None, text: str, supersedes: tuple[str, ...] = (),
              base: bool = False) -> HistoryItem:
            return HistoryItem(id, {"role": role, "content": [{"type": "text", "text": text}]}, 1, len(text),
                               node=node, supersedes=supersedes, base=base)

        def texts(items: list[HistoryItem]) -> list[str]:
            return [i.data["content"][0]["text"] for i in items]

        await store.apply([CreateConversation(OWNER, "c", 1.0),
                           AppendHistory(OWNER, "c", "visible", (
                               v("u1", "user", None), v("a1", "assistant", "u1"), v("u2", "user", "a1"),
                               v("a2", "assistant", "u2"), v("u3", "user", "a2"), v("a3", "assistant", "u3"))),
                           AppendHistory(OWNER, "c", "model", (
                               m("x1", "user", "u1", "q1"), m("x2", "assistant", "a1", "a1"),
                               m("x3", "user", "u2", "q2"), m("x4", "assistant", "a2", "a2"),
                               # made before u3's turn: u1..u2 summed up, q2 merged into it
                               m("s", "user", "u2", "summary+q2", ("x1", "x2", "x3"), base=True),
                               m("x5", "user", "u3", "q3"), m("x6", "assistant", "a3", "a3"))),
                           SetLeaf(OWNER, "c", "a3")])
        assert texts(await store.load_history(OWNER, "c", "model")) == ["summary+q2", "a2", "q3", "a3"]
        assert texts(await store.load_history(OWNER, "c", "model", "a2")) == ["summary+q2", "a2"]
        size = await store.history_size(OWNER, "c", "model")
        assert (size.count, size.tokens, size.chars) == (4, 4, len("summary+q2a2q3a3"))

        # a branch from a1, written after: its path never met the summary's message
        await store.apply([AppendHistory(OWNER, "c", "visible", (v("u2b", "user", "a1"),)),
                           AppendHistory(OWNER, "c", "model", (m("y1", "user", "u2b", "q2b"),)),
                           SetLeaf(OWNER, "c", "u2b")])
        assert texts(await store.load_history(OWNER, "c", "model")) == ["q1", "a1", "q2b"]
        assert texts(await store.load_history(OWNER, "c", "model", "a3")) == ["summary+q2", "a2", "q3", "a3"]

        # back on the summary's path, a turn under way: its reply is no message yet
        await store.apply([AppendHistory(OWNER, "c", "visible", (v("u4", "user", "a3"),)),
                           AppendHistory(OWNER, "c", "model", (m("z1", "user", "u4", "q4"),
                                                                m("r1", "assistant", "r", "running"))),
                           SetLeaf(OWNER, "c", "u4")])
        assert texts(await store.load_history(OWNER, "c", "model")) == ["summary+q2", "a2", "q3", "a3", "q4", "running"]
        assert texts(await store.load_history(OWNER, "c", "model", "a3")) == ["summary+q2", "a2", "q3", "a3"]
        # a message read as its text (one that has no items), after the summary: still read
        await store.apply([DeleteHistoryItems(OWNER, "c", "model", ("x5",))])
        assert [i.id for i in await store.load_history(OWNER, "c", "model", "a3")] == ["s", "x4", "v:u3", "x6"]

    if backend == "sqlite":  # and nothing before the summary's message was read for that
        with sqlite3.connect(tmp_path / "t.db") as db:
            read: list[str] = []  # the first column of every row read: the message's or item's id

            def execute(sql: str, params: Sequence[Any]) -> list[Any]:
                rows = db.execute(sql, params).fetchall()
                read.extend(str(row[0]) for row in rows)
                return rows

            items = trees.run_sync(trees.read_model(OWNER, "c", "a3"), execute)
            assert [i.id for i in items] == ["s", "x4", "v:u3", "x6"]
            assert not {"u1", "a1", "x1", "x2"} & set(read)

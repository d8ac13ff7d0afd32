"""MemoryBook on a real SQLite store and writer: caching, merging, persistence, validation."""

from __future__ import annotations

import asyncio

import pytest

from chat_agent.canvas.memory import MemoryBook, render_memories, validate_memories
from chat_agent.store import MemoriesRecord, SetMemories, SqliteStore


class CountingStore:
    """The real store, counting reads: tells a cache hit from a miss without mocking."""

    def __init__(self, store: SqliteStore, gate: asyncio.Event | None = None) -> None:
        self.store, self.reads, self.gate = store, 0, gate

    async def get_memories(self, owner: str) -> MemoriesRecord | None:
        self.reads += 1
        record = await self.store.get_memories(owner)
        if self.gate is not None:
            await self.gate.wait()
        return record


async def test_load_empty_then_cached(db):
    store, writer = db
    counting = CountingStore(store)
    book = MemoryBook(counting, writer)  # type: ignore[arg-type]
    first = await book.load("alice")
    assert (first.style_rules, first.content) == ([], [])
    assert await book.load("alice") is first and counting.reads == 1
    await book.load("bob")
    assert counting.reads == 2


async def test_load_reads_what_is_stored(db):
    store, writer = db
    writer.submit([SetMemories("alice", MemoriesRecord(["Be brief."], ["Likes Rust."], 5.0))])
    await writer.flush()
    record = await MemoryBook(store, writer).load("alice")
    assert (record.style_rules, record.content, record.updated_at) == (["Be brief."], ["Likes Rust."], 5.0)


async def test_add_merges_cleans_and_dedupes(db):
    store, writer = db
    book = MemoryBook(store, writer)
    await book.load("alice")
    book.add("alice", ["  Use   British\nspelling. "], ["Writes about birds."])
    record = book.add("alice", ["use british SPELLING.", "", "No emojis."], ["Lives in Leeds."])
    # the repeat took the place and wording of its newest occurrence; the empty item was dropped
    assert record.style_rules == ["use british SPELLING.", "No emojis."]
    assert record.content == ["Writes about birds.", "Lives in Leeds."]
    assert book.for_user("alice").current() is record


async def test_add_keeps_the_newest_past_the_cap(db):
    store, writer = db
    book = MemoryBook(store, writer, max_items=3)
    await book.load("alice")
    book.add("alice", [], ["one", "two", "three"])
    assert book.add("alice", [], ["four"]).content == ["two", "three", "four"]


async def test_add_without_a_change_writes_nothing(db):
    store, writer = db
    book = MemoryBook(store, writer)
    await book.load("alice")
    book.add("alice", ["Be brief."], [])
    ticket = writer.ticket
    book.add("alice", ["Be   brief. "], [])  # cleans to what is there already
    assert writer.ticket == ticket
    book.add("alice", ["be brief."], [])  # new wording: a change
    assert writer.ticket == ticket + 1


async def test_add_rejects_bad_items_and_needs_a_load(db):
    store, writer = db
    book = MemoryBook(store, writer, max_chars=10)
    with pytest.raises(RuntimeError, match="load"):
        book.add("alice", ["x"], [])
    await book.load("alice")
    with pytest.raises(ValueError, match=r"content\[0\] is 11 characters long"):
        book.add("alice", [], ["abcdefghijk"])
    with pytest.raises(ValueError, match=r"styleRules\[1\] must be a string"):
        book.add("alice", ["ok", 3], [])  # type: ignore[list-item]


async def test_replace_delete_and_persistence(db):
    store, writer = db
    book = MemoryBook(store, writer)
    await book.load("alice")
    book.replace("alice", ["Be brief.", "be brief.", "  "], ["Likes Rust."])
    await writer.flush()
    reloaded = await MemoryBook(store, writer).load("alice")
    assert (reloaded.style_rules, reloaded.content) == (["be brief."], ["Likes Rust."])
    assert reloaded.updated_at > 0
    book.delete("alice")
    assert (await book.load("alice")).content == []  # at once, before the delete commits
    await writer.flush()
    assert await store.get_memories("alice") is None
    assert (await MemoryBook(store, writer).load("alice")).style_rules == []


async def test_a_forgotten_owner_sees_its_queued_write(db):
    store, writer = db
    book = MemoryBook(store, writer, max_owners=1)
    await book.load("alice")
    book.replace("alice", [], ["Likes Rust."])
    await book.load("bob")  # alice falls out of the cache, her write maybe not committed yet
    assert (await book.load("alice")).content == ["Likes Rust."]


async def test_user_memory_survives_eviction(db):
    store, writer = db
    book = MemoryBook(store, writer, max_owners=1)
    await book.load("alice")
    memory = book.for_user("alice")
    await book.load("bob")
    assert memory.add([], ["Likes Rust."]).content == ["Likes Rust."]
    assert book.peek("alice") is memory.current()


async def test_a_change_during_load_wins(db):
    store, writer = db
    writer.submit([SetMemories("alice", MemoriesRecord([], ["old"], 1.0))])
    await writer.flush()
    gated = CountingStore(store, gate=asyncio.Event())
    book = MemoryBook(gated, writer)  # type: ignore[arg-type]
    loading = asyncio.create_task(book.load("alice"))
    await asyncio.sleep(0.01)
    assert gated.reads == 1  # the read is in flight...
    book.replace("alice", [], ["new"])  # ...when a PUT lands
    gated.gate.set()
    assert (await loading).content == ["new"]
    assert (await book.load("alice")).content == ["new"]


def test_validate_memories():
    assert validate_memories([" a  b ", "A B"], []) == (["A B"], [])
    with pytest.raises(ValueError, match="styleRules must be a list of strings, got str"):
        validate_memories("be brief", [])
    with pytest.raises(ValueError, match="content must be a list"):
        validate_memories([], None)
    with pytest.raises(ValueError, match=r"content\[1\] is empty"):
        validate_memories([], ["x", "   "])
    with pytest.raises(ValueError, match=r"content\[0\] must be a string, got int"):
        validate_memories([], [1])
    with pytest.raises(ValueError, match=r"styleRules\[0\] is 5 characters long; the limit is 4"):
        validate_memories(["abcde"], [], max_chars=4)
    with pytest.raises(ValueError, match="content has 3 items; the limit is 2"):
        validate_memories([], ["a", "b", "c"], max_items=2)


def test_render_memories():
    assert render_memories(MemoriesRecord([], [], 0.0)) is None
    text = render_memories(MemoriesRecord(["Be brief."], ["Likes Rust."], 0.0))
    assert text is not None and "- Be brief." in text and "- Likes Rust." in text
    assert text.index("<style_rules>") < text.index("Be brief.") < text.index("</style_rules>")
    only_facts = render_memories(MemoriesRecord([], ["Likes Rust."], 0.0))
    assert only_facts is not None and "style_rules" not in only_facts

"""MemoryBook on real stores (SQLite and PostgreSQL): every read goes to the store, every
change is a compare-and-set that a concurrent change never undoes, whichever instance made it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from chat_agent.canvas.memory import MemoryBook, MemoryConflict, merge_items, render_memories, validate_memories
from chat_agent.store import MemoriesRecord, SetMemories, Store, StoreWriter
from tests.stores import Backend


class Instance:
    """One server's view of the database: a store of its own, its writer, its MemoryBook."""

    def __init__(self, store: Store, **book_options: int) -> None:
        self.store = store
        self.writer = StoreWriter(store)
        self.book = MemoryBook(store, self.writer, **book_options)

    async def __aenter__(self) -> "Instance":
        await self.store.open()
        self.writer.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.writer.close()
        await self.store.close()


@pytest_asyncio.fixture
async def one(backend: Backend) -> AsyncIterator[Instance]:
    async with Instance(backend.new()) as instance:
        yield instance


@pytest_asyncio.fixture
async def two(backend: Backend, one: Instance) -> AsyncIterator[tuple[Instance, Instance]]:
    """Two instances on one database."""
    async with Instance(backend.new()) as other:
        yield one, other


async def test_every_load_reads_what_another_instance_stored(two):
    a, b = two
    assert (await a.book.load("alice")).content == []
    await b.book.replace("alice", [], ["Likes Rust."])
    assert (await a.book.load("alice")).content == ["Likes Rust."]  # nothing stale is served
    await b.book.delete("alice")
    assert (await a.book.load("alice")).content == []


async def test_add_merges_cleans_and_dedupes(one):
    book = one.book
    await book.add("alice", ["  Use   British\nspelling. "], ["Writes about birds."])
    record = await book.add("alice", ["use british SPELLING.", "", "No emojis."], ["Lives in Leeds."])
    # the repeat took the place and wording of its newest occurrence; the empty item was dropped
    assert record.style_rules == ["use british SPELLING.", "No emojis."]
    assert record.content == ["Writes about birds.", "Lives in Leeds."]
    assert await book.load("alice") == record


async def test_add_keeps_the_newest_past_the_cap(backend: Backend):
    async with Instance(backend.new(), max_items=3) as instance:
        await instance.book.add("alice", [], ["one", "two", "three"])
        assert (await instance.book.add("alice", [], ["four"])).content == ["two", "three", "four"]


async def test_a_change_that_changes_nothing_writes_nothing(one):
    book = one.book
    first = await book.add("alice", ["Be brief."], [])
    again = await book.add("alice", ["Be   brief. "], [])  # cleans to what is there already
    assert again.version == first.version
    changed = await book.add("alice", ["be brief."], [])  # new wording: a change
    assert changed.version != first.version and changed.style_rules == ["be brief."]


async def test_bad_items_are_refused_before_anything_is_written(backend: Backend):
    async with Instance(backend.new(), max_chars=10) as instance:
        with pytest.raises(ValueError, match=r"content\[0\] is 11 characters long"):
            await instance.book.add("alice", [], ["abcdefghijk"])
        with pytest.raises(ValueError, match=r"styleRules\[1\] must be a string"):
            await instance.book.replace("alice", ["ok", 3], [])  # type: ignore[list-item]
        assert await instance.store.get_memories("alice") is None


async def test_replace_and_delete(one):
    book = one.book
    record = await book.replace("alice", ["Be brief.", "be brief.", "  "], ["Likes Rust."])
    assert (record.style_rules, record.content) == (["be brief."], ["Likes Rust."]) and record.updated_at > 0
    assert await one.store.get_memories("alice") == record
    await book.delete("alice")
    assert await one.store.get_memories("alice") is None
    assert (await book.load("alice")).style_rules == []


async def test_concurrent_adds_on_two_instances_lose_nothing(two):
    a, b = two
    await asyncio.gather(*(instance.book.add("alice", [], [f"fact {instance is a} {n}"])
                           for n in range(10) for instance in (a, b)))
    stored = await a.book.load("alice")
    assert sorted(stored.content) == sorted(f"fact {first} {n}" for n in range(10) for first in (True, False))


async def test_a_revision_keeps_what_changed_meanwhile(two):
    """The background reflection rewrites what it read; a fact added meanwhile on another
    instance stays, a fact deleted meanwhile stays deleted, and what the rewrite dropped
    stays dropped."""
    a, b = two
    base = await a.book.replace("alice", ["Be brief."], ["Likes Rust.", "Lives in Leeds.", "Old job."])
    await b.book.add("alice", [], ["Teaches chemistry."])
    await b.store.apply([SetMemories("alice", MemoriesRecord(
        ["Be brief."], ["Likes Rust.", "Old job.", "Teaches chemistry."], 2.0))])  # "Lives in Leeds." deleted
    revised = await a.book.revise("alice", base, ["Be brief.", "No emojis."],
                                  ["Likes Rust and Go.", "Lives in Leeds."])
    assert revised.style_rules == ["Be brief.", "No emojis."]
    assert revised.content == ["Likes Rust and Go.", "Teaches chemistry."]


async def test_a_revision_of_unchanged_memories_is_the_rewrite(one):
    base = await one.book.replace("alice", ["Be brief."], ["Likes Rust."])
    revised = await one.book.revise("alice", base, ["Be concise."], ["Likes Rust.", "Writes in Go."])
    assert (revised.style_rules, revised.content) == (["Be concise."], ["Likes Rust.", "Writes in Go."])


async def test_a_revision_after_a_delete_keeps_only_what_is_new(one):
    base = await one.book.replace("alice", [], ["Likes Rust."])
    await one.book.delete("alice")
    revised = await one.book.revise("alice", base, [], ["Likes Rust.", "Writes in Go."])
    assert revised.content == ["Writes in Go."]


class Meddler:
    """The real store of one instance, with another instance's write landing just before each
    of its compare-and-sets: a writer that always loses the race."""

    def __init__(self, store: Store, other: MemoryBook) -> None:
        self.store, self.other, self.swaps = store, other, 0

    async def get_memories(self, owner: str) -> MemoriesRecord | None:
        return await self.store.get_memories(owner)

    async def swap_memories(self, owner: str, record: MemoriesRecord, expected: str | None) -> MemoriesRecord | None:
        self.swaps += 1
        await self.other.add(owner, [], [f"meanwhile {self.swaps}"])
        return await self.store.swap_memories(owner, record, expected)


async def test_a_change_that_always_loses_gives_up(two):
    a, b = two
    meddled = Meddler(a.store, b.book)
    book = MemoryBook(meddled, a.writer, attempts=4)  # type: ignore[arg-type]
    with pytest.raises(MemoryConflict):
        await book.add("alice", ["Be brief."], [])
    assert meddled.swaps == 4
    stored = await a.book.load("alice")
    assert stored.style_rules == [] and stored.content == [f"meanwhile {n}" for n in range(1, 5)]


async def test_a_turn_s_memory_is_what_it_read_and_what_it_wrote(two):
    a, b = two
    await a.book.add("alice", [], ["Likes Rust."])
    memory = a.book.for_user("alice", await a.book.load("alice"))
    await b.book.add("alice", [], ["Teaches chemistry."])  # another turn, elsewhere
    assert memory.current().content == ["Likes Rust."]  # what this turn's prompt says
    after = await memory.add(["No emojis."], [])
    assert after.content == ["Likes Rust.", "Teaches chemistry."] and after.style_rules == ["No emojis."]
    assert memory.current() == after


def test_merge_items():
    assert merge_items(["a", "b"], ["a", "c"], ["a", "b"]) == ["a", "c"]  # nothing changed meanwhile
    assert merge_items(["a", "b"], ["a", "c"], ["a", "b", "d"]) == ["a", "c", "d"]  # d added meanwhile
    assert merge_items(["a", "b"], ["a", "b", "c"], ["b"]) == ["b", "c"]  # a deleted meanwhile
    assert merge_items([], ["x"], ["X", "y"]) == ["X", "y"]  # both added it: once, as stored
    assert merge_items(["a"], [], ["a", "b"]) == ["b"]


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

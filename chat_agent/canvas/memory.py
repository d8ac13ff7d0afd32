"""A user's durable memories (`{styleRules, content}`): cached per owner, written through the writer.

    book = MemoryBook(store, writer)
    record = await book.load(owner)        # once per turn, before the sync calls below
    ctx_memory = book.for_user(owner)      # what the `reflect` tool gets as `ctx.memory`
    system_block = render_memories(record)

Reads are async (the store); changes are sync: the cache is updated at once and the write
is queued on the group-commit writer, so a tool or an HTTP handler never waits on the disk.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

from chat_agent.store import DeleteMemories, MemoriesRecord, SetMemories, Store
from chat_agent.store.writer import StoreWriter

MAX_ITEMS = 40  # per list
MAX_CHARS = 400  # per item
MAX_OWNERS = 10_000  # cached owners; the least recently used are forgotten beyond that


def clean_item(item: str) -> str:
    """Stripped, with every run of whitespace (newlines included) made one space."""
    return " ".join(item.split())


def item_key(item: str) -> str:
    """What makes two items the same one: case and spacing do not count."""
    return clean_item(item).casefold()


def empty_record() -> MemoriesRecord:
    return MemoriesRecord(style_rules=[], content=[], updated_at=0.0)


def _check_list(name: str, value: Any, max_chars: int) -> list[str]:
    """The cleaned, non-empty items of `value`; raises ValueError on a non-list, a non-string
    or an item that is too long (messages name the field, as a client or the model sent it)."""
    if not isinstance(value, list):
        raise ValueError(f"{name} must be a list of strings, got {type(value).__name__}")
    items: list[str] = []
    for i, raw in enumerate(value):
        if not isinstance(raw, str):
            raise ValueError(f"{name}[{i}] must be a string, got {type(raw).__name__}")
        item = clean_item(raw)
        if len(item) > max_chars:
            raise ValueError(f"{name}[{i}] is {len(item)} characters long; the limit is {max_chars}")
        items.append(item)
    return items


def dedupe_items(items: Iterable[str]) -> list[str]:
    """Drops empties and repeats; a repeated item takes the place (and wording) of its last
    occurrence, so something said again counts as new."""
    seen: dict[str, str] = {}
    for item in items:
        if item:
            key = item_key(item)
            seen.pop(key, None)
            seen[key] = item
    return list(seen.values())


def validate_memories(
    style_rules: Any, content: Any, *, max_items: int = MAX_ITEMS, max_chars: int = MAX_CHARS
) -> tuple[list[str], list[str]]:
    """A PUT body's two lists, cleaned and de-duplicated. Raises ValueError with a readable
    message when either is not a list of non-empty strings, an item is longer than
    `max_chars`, or a list has more than `max_items` items."""
    lists = []
    for name, value in (("styleRules", style_rules), ("content", content)):
        items = _check_list(name, value, max_chars)
        if not all(items):
            raise ValueError(f"{name}[{items.index('')}] is empty")
        items = dedupe_items(items)
        if len(items) > max_items:
            raise ValueError(f"{name} has {len(items)} items; the limit is {max_items}")
        lists.append(items)
    return lists[0], lists[1]


def render_memories(record: MemoriesRecord) -> str | None:
    """The system-prompt block that tells the model what it remembers of the user."""
    if not record.style_rules and not record.content:
        return None
    parts = [
        "<memories>",
        "What you remember about this user from earlier conversations. Follow the style rules "
        "whenever you write for them, in the chat and in the artifact, unless they ask for "
        "something else now; what they ask now wins. Use the facts where they help, without "
        "reciting them.",
    ]
    if record.style_rules:
        parts += ["<style_rules>", *(f"- {rule}" for rule in record.style_rules), "</style_rules>"]
    if record.content:
        parts += ["<facts>", *(f"- {fact}" for fact in record.content), "</facts>"]
    parts.append("</memories>")
    return "\n".join(parts)


class MemoryBook:
    """The process's memories: a cache per owner in front of the store."""

    def __init__(
        self, store: Store, writer: StoreWriter, *, max_items: int = MAX_ITEMS, max_chars: int = MAX_CHARS,
        max_owners: int = MAX_OWNERS,
    ) -> None:
        self._store = store
        self._writer = writer
        self.max_items = max_items
        self.max_chars = max_chars
        self._max_owners = max_owners
        self._cache: OrderedDict[str, MemoriesRecord] = OrderedDict()

    async def load(self, owner: str) -> MemoriesRecord:
        """The owner's memories: cached, else read from the store; empty if none."""
        cached = self._cache.get(owner)
        if cached is not None:
            self._cache.move_to_end(owner)
            return cached
        # A change to an owner forgotten by the cache may still sit in the writer's queue.
        await self._writer.flush()
        record = await self._store.get_memories(owner) or empty_record()
        # A change made while we awaited is newer than what we read: it wins.
        return self._adopt(owner, record)

    def peek(self, owner: str) -> MemoriesRecord | None:
        """The cached memories, or None if `load(owner)` has not run (or was forgotten)."""
        return self._cache.get(owner)

    def replace(self, owner: str, style_rules: list[str], content: list[str]) -> MemoriesRecord:
        """Sets both lists as given (cleaned, de-duplicated, the newest `max_items` kept).
        Raises ValueError on a non-string or an over-long item."""
        rules = dedupe_items(_check_list("styleRules", style_rules, self.max_chars))[-self.max_items:]
        facts = dedupe_items(_check_list("content", content, self.max_chars))[-self.max_items:]
        return self._set(owner, rules, facts)

    def add(self, owner: str, style_rules: list[str], content: list[str]) -> MemoriesRecord:
        """Appends to the loaded memories; an item already there (ignoring case and spacing)
        moves to the end instead. Past `max_items` the oldest go. Needs `load(owner)` first:
        merging into memories we have not read would overwrite them."""
        current = self._loaded(owner)
        rules = _check_list("styleRules", style_rules, self.max_chars)
        facts = _check_list("content", content, self.max_chars)
        return self._set(
            owner,
            dedupe_items([*current.style_rules, *rules])[-self.max_items:],
            dedupe_items([*current.content, *facts])[-self.max_items:],
        )

    def forget(self, owner: str) -> None:
        """Drops the cached memories (a write of them was lost): the next load reads the store."""
        self._cache.pop(owner, None)

    def delete(self, owner: str) -> None:
        # Cached as empty rather than dropped: the store may not have committed the delete yet.
        self._remember(owner, empty_record())
        self._writer.submit([DeleteMemories(owner)])

    def for_user(self, owner: str) -> UserMemory:
        return UserMemory(self, owner, self._loaded(owner))

    def _set(self, owner: str, style_rules: list[str], content: list[str]) -> MemoriesRecord:
        current = self._cache.get(owner)
        if current is not None and current.style_rules == style_rules and current.content == content:
            return current  # nothing changed: no write
        record = MemoriesRecord(style_rules=style_rules, content=content, updated_at=time.time())
        self._remember(owner, record)
        self._writer.submit([SetMemories(owner, record)])
        return record

    def _loaded(self, owner: str) -> MemoriesRecord:
        record = self._cache.get(owner)
        if record is None:
            raise RuntimeError(f"memories of {owner!r} are not loaded: await MemoryBook.load() first")
        return record

    def _adopt(self, owner: str, record: MemoriesRecord) -> MemoriesRecord:
        """Caches `record` unless something newer is cached already; returns what is cached."""
        if owner not in self._cache:
            self._remember(owner, record)
        return self._cache[owner]

    def _remember(self, owner: str, record: MemoriesRecord) -> None:
        self._cache[owner] = record
        self._cache.move_to_end(owner)
        while len(self._cache) > self._max_owners:
            self._cache.popitem(last=False)


class UserMemory:
    """One user's memories as a turn's tools see them (`ToolContext.memory`)."""

    def __init__(self, book: MemoryBook, owner: str, record: MemoriesRecord) -> None:
        self._book = book
        self.owner = owner
        self._last = record  # what this turn saw, should the cache forget the owner meanwhile

    @property
    def max_items(self) -> int:
        return self._book.max_items

    @property
    def max_chars(self) -> int:
        return self._book.max_chars

    def current(self) -> MemoriesRecord:
        self._last = self._book._adopt(self.owner, self._last)
        return self._last

    def add(self, style_rules: list[str], content: list[str]) -> MemoriesRecord:
        self.current()  # re-seeds the cache if it forgot this owner mid-turn
        self._last = self._book.add(self.owner, style_rules, content)
        return self._last

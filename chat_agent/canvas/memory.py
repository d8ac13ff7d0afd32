"""A user's durable memories (`{styleRules, content}`), read from the store and changed by
compare-and-set.

    book = MemoryBook(store, writer)
    record = await book.load(owner)              # once per turn: one read
    ctx_memory = book.for_user(owner, record)    # what the `reflect` tool gets as `ctx.memory`
    system_block = render_memories(record)
    await book.add(owner, ["Be brief."], [])     # appended to what is stored now

Several instances may serve one user at once (two conversations, a background reflection,
a PUT), so nothing is cached: a cache here would serve memories another instance has since
replaced. Every change is a function of the memories as stored: read them, compute the new
lists, write them only if the stored version is still the one read (`Store.swap_memories`),
else read again and compute again. No change is ever lost to a concurrent one.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Iterable
from typing import Any

from chat_agent.store import DeleteMemories, MemoriesRecord, Store
from chat_agent.store.writer import StoreWriter

MAX_ITEMS = 40  # per list
MAX_CHARS = 400  # per item
# Compare-and-set attempts of one change before giving up, each after a read; between them a
# short random pause, so that writers that keep colliding drift apart.
ATTEMPTS = 32
BACKOFF = 0.005  # seconds, times the attempt number: the longest pause

Lists = tuple[list[str], list[str]]  # (styleRules, content)


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


def merge_items(base: list[str], ours: list[str], theirs: list[str]) -> list[str]:
    """`ours`, a rewrite of `base`, carried over onto `theirs`, what `base` has become
    meanwhile (another writer's change): what the rewrite dropped or reworded stays dropped,
    what the other writer added since `base` is kept (after ours), and what it dropped stays
    dropped. With `theirs` still `base`, it is `ours`."""
    before = {item_key(item) for item in base}
    now = {item_key(item) for item in theirs}
    kept = [item for item in ours if item_key(item) not in before or item_key(item) in now]
    added = [item for item in theirs if item_key(item) not in before]
    return dedupe_items([*kept, *added])


class MemoryConflict(RuntimeError):
    """A change kept meeting concurrent writes of the same memories and was not stored."""


class MemoryBook:
    """Users' memories in the store; see the module's doc."""

    def __init__(self, store: Store, writer: StoreWriter, *, max_items: int = MAX_ITEMS,
                 max_chars: int = MAX_CHARS, attempts: int = ATTEMPTS) -> None:
        self._store = store
        self._writer = writer
        self.max_items = max_items
        self.max_chars = max_chars
        self._attempts = attempts

    async def load(self, owner: str) -> MemoriesRecord:
        """The owner's memories as stored now (one read); empty if none."""
        return await self._store.get_memories(owner) or empty_record()

    async def replace(self, owner: str, style_rules: list[str], content: list[str]) -> MemoriesRecord:
        """Sets both lists as given (cleaned, de-duplicated, the newest `max_items` kept),
        whatever is stored: what the user asked for (PUT). Raises ValueError on a non-string
        or an over-long item."""
        rules, facts = self._clean(style_rules, content)
        return (await self._change(owner, lambda current: (rules, facts)))

    async def add(self, owner: str, style_rules: list[str], content: list[str]) -> MemoriesRecord:
        """Appends to the memories as stored; an item already there (ignoring case and
        spacing) moves to the end instead. Past `max_items` the oldest go. Raises ValueError
        on a non-string or an over-long item."""
        rules = _check_list("styleRules", style_rules, self.max_chars)
        facts = _check_list("content", content, self.max_chars)
        return (await self._change(owner, lambda current: (
            dedupe_items([*current.style_rules, *rules])[-self.max_items:],
            dedupe_items([*current.content, *facts])[-self.max_items:],
        )))

    async def revise(self, owner: str, base: MemoriesRecord, style_rules: list[str],
                     content: list[str]) -> MemoriesRecord:
        """Stores a rewrite of `base` (the background reflection's): over `base` as it is, or,
        where the memories changed since it was read, merged into them (`merge_items`), so
        that a change made meanwhile elsewhere is not undone."""
        rules, facts = self._clean(style_rules, content)
        return (await self._change(owner, lambda current: (
            merge_items(base.style_rules, rules, current.style_rules)[-self.max_items:],
            merge_items(base.content, facts, current.content)[-self.max_items:],
        )))

    async def delete(self, owner: str) -> None:
        """Forgets the owner's memories; returns once that is stored."""
        await self._writer.commit([DeleteMemories(owner)])

    def for_user(self, owner: str, record: MemoriesRecord) -> UserMemory:
        """The memories a turn's tools see: `record`, what the turn read at its start."""
        return UserMemory(self, owner, record)

    def _clean(self, style_rules: list[str], content: list[str]) -> Lists:
        return (dedupe_items(_check_list("styleRules", style_rules, self.max_chars))[-self.max_items:],
                dedupe_items(_check_list("content", content, self.max_chars))[-self.max_items:])

    async def _change(self, owner: str, change: Callable[[MemoriesRecord], Lists]) -> MemoriesRecord:
        """Applies `change` to the memories as stored, by compare-and-set; returns what is
        stored then. A change that changes nothing writes nothing."""
        for attempt in range(1, self._attempts + 1):
            current = await self.load(owner)
            rules, facts = change(current)
            if rules == current.style_rules and facts == current.content:
                return current
            record = MemoriesRecord(style_rules=rules, content=facts, updated_at=time.time())
            stored = await self._store.swap_memories(owner, record, current.version)
            if stored is not None:
                return stored
            await asyncio.sleep(random.uniform(0, BACKOFF * attempt))  # written meanwhile: again
        raise MemoryConflict(f"the memories of {owner!r} kept changing under {self._attempts} attempts to change them")


class UserMemory:
    """One user's memories as a turn's tools see them (`ToolContext.memory`)."""

    def __init__(self, book: MemoryBook, owner: str, record: MemoriesRecord) -> None:
        self._book = book
        self.owner = owner
        self._last = record  # what this turn knows: read at its start, or written by it since

    @property
    def max_items(self) -> int:
        return self._book.max_items

    @property
    def max_chars(self) -> int:
        return self._book.max_chars

    def current(self) -> MemoriesRecord:
        """The memories as this turn knows them (those in its system prompt, or as its own
        last change left them)."""
        return self._last

    async def add(self, style_rules: list[str], content: list[str]) -> MemoriesRecord:
        """Appends to the memories as stored now (see `MemoryBook.add`); what is stored after."""
        self._last = await self._book.add(self.owner, style_rules, content)
        return self._last

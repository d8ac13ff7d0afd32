"""Search (PROTOCOL 1.2 "Find, rename, move conversations"): how long finding a phrase takes
among 10,000 conversations, on SQLite (FTS5) and PostgreSQL (tsvector + GIN).

One user's 10,000 conversations are written through the store's own ops (so the search index
is kept by the same triggers as in the server): each a title and 8 messages of ~40 words from
a 5,000-word vocabulary, in two branches (a reply regenerated: the first reply is on the
branch that is not active). One conversation's non-active reply holds a phrase nothing else
holds. Then, for each backend, `Store.search_conversations` (what `GET /api/conversations?q=`
runs, first page of 50) is timed:

- phrase: the rare phrase (3 words, found in 1 conversation, on its non-active branch);
- common: 2 frequent words (found in thousands of conversations: ranking all of them);
- title: a word of the target's title.

Target: phrase p50 < 50 ms on both backends. The ratio printed is the worse p50 / 50 ms.

    python bench/search.py [--conversations 10000] [--runs 60] [--backends sqlite,postgres]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from chat_agent.store import (AppendHistory, CreateConversation, HistoryItem, PostgresStore, SetLeaf,  # noqa: E402
                              SetTitle, SqliteStore, Store)
from chat_agent.store.tree import ROOT  # noqa: E402

OWNER = "bench"
TARGET_MS = 50.0
PHRASE = "quixotic marmalade telescope"
BATCH = 250


def vocabulary(rng: random.Random, size: int = 5_000) -> list[str]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    return ["".join(rng.choice(letters) for _ in range(rng.randint(3, 9))) for _ in range(size)]


def words(rng: random.Random, vocab: list[str], n: int) -> str:
    # Zipf-like: a few words are everywhere, most are rare, as in real text.
    return " ".join(vocab[min(int(rng.paretovariate(1.1)) - 1, len(vocab) - 1)] for _ in range(n))


def message(id: str, role: str, parent: str | None, text: str, at: float) -> HistoryItem:
    data = {"id": id, "role": role, "createdAt": at, "status": "complete", "parts": [{"type": "text", "text": text}]}
    return HistoryItem(id, data, 0, len(text), parent_id=ROOT if parent is None else parent)


def conversation(n: int, rng: random.Random, vocab: list[str], target: bool) -> list:
    cid = f"c{n:06d}"
    at = 1_700_000_000.0 + n
    items, parent = [], None
    for turn in range(3):
        user = message(f"u{turn}", "user", parent, words(rng, vocab, 40), at)
        reply = message(f"a{turn}", "assistant", user.id, words(rng, vocab, 40), at)
        items += [user, reply]
        parent = reply.id
    # the last reply regenerated: the first version is on the branch that is not active
    old = items[-1]
    if target:
        old.data["parts"][0]["text"] += f" and then a {PHRASE} appeared"
    again = message("a2b", "assistant", items[-2].id, words(rng, vocab, 40), at)
    follow = message("u3", "user", again.id, words(rng, vocab, 40), at)
    items += [again, follow]
    return [CreateConversation(OWNER, cid, at), SetTitle(OWNER, cid, ("Target " if target else "") + words(rng, vocab, 4)),
            AppendHistory(OWNER, cid, "visible", tuple(items)), SetLeaf(OWNER, cid, follow.id)]


async def seed(store: Store, count: int, target: int) -> None:
    rng = random.Random(7)
    vocab = vocabulary(rng)
    ops: list = []
    for n in range(count):
        ops += conversation(n, rng, vocab, n == target)
        if len(ops) >= BATCH * 4:
            await store.apply(ops)
            ops = []
    if ops:
        await store.apply(ops)


async def timed(store: Store, terms: list[str], runs: int) -> tuple[float, int, str | None]:
    times, found, first = [], 0, None
    for _ in range(runs):
        start = time.perf_counter()
        hits = await store.search_conversations(OWNER, terms, 50)
        times.append((time.perf_counter() - start) * 1000)
        found, first = len(hits), hits[0].record.id if hits else None
    return statistics.median(times), found, first


async def bench(name: str, store: Store, count: int, runs: int) -> float:
    target = count // 2
    async with store:
        start = time.perf_counter()
        await seed(store, count, target)
        print(f"{name}: {count} conversations written in {time.perf_counter() - start:.1f} s")
        if isinstance(store, PostgresStore):  # what its indexer does within seconds of such a load
            start = time.perf_counter()
            indexed = await store.index_search_documents()
            print(f"  {indexed} documents indexed after their commits in {time.perf_counter() - start:.1f} s")
        p50, found, first = await timed(store, PHRASE.split(), runs)
        assert found == 1 and first == f"c{target:06d}", (found, first)
        print(f"  phrase (non-active branch, 1 hit):   p50 {p50:7.2f} ms")
        hits = await store.search_conversations(OWNER, PHRASE.split(), 50)
        print(f"    match {hits[0].message_id}: {hits[0].snippet!r}")
        common = []
        rng = random.Random(7)
        vocab = vocabulary(rng)
        common = vocab[:2]
        c50, cfound, _ = await timed(store, common, max(5, runs // 4))
        print(f"  common words ({cfound} on page 1):      p50 {c50:7.2f} ms")
        t50, tfound, tfirst = await timed(store, ["target"], runs)
        assert tfirst == f"c{target:06d}"
        print(f"  title word:                          p50 {t50:7.2f} ms")
    return p50


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--conversations", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=60)
    parser.add_argument("--backends", default="sqlite,postgres")
    args = parser.parse_args()
    worst = 0.0
    for backend in args.backends.split(","):
        if backend == "sqlite":
            with tempfile.TemporaryDirectory() as tmp:
                worst = max(worst, await bench("sqlite", SqliteStore(Path(tmp) / "search.db"), args.conversations,
                                               args.runs))
        else:
            from tests import pg
            with pg.isolated_database() as url:
                worst = max(worst, await bench("postgres", PostgresStore(url), args.conversations, args.runs))
    ratio = worst / TARGET_MS
    print(f"phrase p50 worst {worst:.2f} ms; target < {TARGET_MS:.0f} ms; ratio {ratio:.2f} "
          f"({'OK' if ratio < 1 else 'OVER'})")


if __name__ == "__main__":
    asyncio.run(main())

"""What a 10-character highlight edit costs on artifacts of 1 KB, 100 KB and 1 MB: bytes sent to
each client, bytes added to the database, and how long reading back any version takes.

The real server (`python server.py`, a subprocess) with the fake Anthropic API in this process
(so replies can be scripted, as in canvas_cache.py). Per size: a new conversation, the artifact
generated, a second client joined, then EDITS highlight edits (`update_artifact` forced on a
10-character span, a 10-character replacement) at spread-out places. For each edit:
- sent: the bytes of every frame each client receives from the `message` to `done` (title
  frames included; nothing left out);
- stored: the bytes of what the edit added to SQLite, read from the server's file: its new
  event rows, its new artifact_versions row (content + changes), the growth of the
  conversation's history rows (payload bytes; SQLite's own b-tree overhead is not counted, and
  the page growth is shown beside it, though pruned events free pages and blur it). EDITS is
  more than the store's snapshot cadence (MAX_CHAIN), so the mean includes the full snapshot
  that a run of edits periodically costs.
Then every version of the 1 MB artifact is read back through SqliteStore (resolving delta chains).

Summaries are switched off (CHAT_AGENT_SUMMARY_CHARS): a 1 MB artifact in the history would
otherwise be summarized during the first edit, which is a different cost.

Targets at 1 MB: <= 20 KB sent per client per edit (the largest edit) and <= 100 KB stored per
edit (the mean). Ratio = the worse of sent/20 KB and stored/100 KB.

    python bench/artifact_scaling.py [--edits 40]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sqlite3
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._common import verdict  # noqa: E402
from bench.canvas_cache import SMALL, document, main_only  # noqa: E402  (the same document and scripting)
from chat_agent.store import SqliteStore  # noqa: E402
from chat_agent.store.writes import MAX_CHAIN  # noqa: E402
from tests.fakes.anthropic_fake import FakeAnthropic, Reply, ToolUse  # noqa: E402
from tests.support import ServerProcess, connect, send, until  # noqa: E402

SIZES = (("1 KB", 1_000), ("100 KB", 100_000), ("1 MB", 1_000_000))
SENT_TARGET, STORED_TARGET = 20_000, 100_000


@dataclass
class Result:
    label: str
    chars: int
    whole_frame: int = 0  # what one `artifact` frame of this artifact weighs
    sent: list[int] = field(default_factory=list)  # per edit, the larger of the two clients
    stored: list[int] = field(default_factory=list)
    pages: list[int] = field(default_factory=list)
    snapshots: int = 0
    versions: int = 0


class Database:
    """The server's SQLite file, read-only, seen through the WAL like the server sees it."""

    def __init__(self, path: Path, conversation_id: str):
        self.db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        self.cid = conversation_id

    def _one(self, sql: str) -> int:
        return int(self.db.execute(sql, (self.cid,)).fetchone()[0] or 0)

    def mark(self) -> tuple[int, int, int, int]:
        seq = self._one("SELECT MAX(seq) FROM events WHERE conversation_id = ?")
        idx = self._one("SELECT MAX(idx) FROM artifact_versions WHERE conversation_id = ?")
        history = self._one("SELECT SUM(LENGTH(CAST(data AS BLOB))) FROM history_items WHERE conversation_id = ?")
        return seq, idx, history, self.used_bytes()

    def used_bytes(self) -> int:
        page = self.db.execute("PRAGMA page_size").fetchone()[0]
        count = self.db.execute("PRAGMA page_count").fetchone()[0]
        free = self.db.execute("PRAGMA freelist_count").fetchone()[0]
        return (count - free) * page

    def added(self, mark: tuple[int, int, int, int]) -> tuple[int, int]:
        """Payload bytes the rows written since `mark` hold, and the growth of used pages."""
        seq, idx, history, used = mark
        events = self._one(f"SELECT SUM(LENGTH(CAST(frame AS BLOB))) FROM events WHERE conversation_id = ? AND seq > {seq}")
        versions = self._one("SELECT SUM(LENGTH(CAST(content AS BLOB)) + COALESCE(LENGTH(CAST(changes AS BLOB)), 0))"
                             f" FROM artifact_versions WHERE conversation_id = ? AND idx > {idx}")
        grown = self.mark()[2] - history
        return events + versions + grown, self.used_bytes() - used

    def snapshots(self) -> tuple[int, int]:
        row = self.db.execute("SELECT SUM(base_idx IS NULL), COUNT(*) FROM artifact_versions WHERE conversation_id = ?",
                              (self.cid,)).fetchone()
        return int(row[0]), int(row[1])


async def frames_until_done(ws) -> int:
    """Bytes of every frame up to and including `done`."""
    total = 0
    while True:
        text = await asyncio.wait_for(ws.recv(), 120)
        total += len(text.encode() if isinstance(text, str) else text)
        if json.loads(text)["type"] == "done":
            return total


async def run_size(server: ServerProcess, fake: FakeAnthropic, label: str, chars: int, edits: int) -> Result:
    doc = document(chars)
    result = Result(label, chars)
    ws, session = await connect(server, ping_interval=None)  # the fake shares this process: a busy GIL is no dead peer
    cid = session["conversationId"]
    fake.enqueue(Reply([ToolUse("generate_artifact", {"title": "Guide", "type": "text", "content": doc})],
                       chunk_size=65_536), Reply("Written."), when=main_only)
    await send(ws, type="message", content="write the guide")
    await until(ws, "done", timeout=120)
    other, joined = await connect(server, cid, ping_interval=None)
    result.whole_frame = len(json.dumps({"type": "artifact", "artifact": joined["artifact"]}).encode())
    db = Database(server.data_dir / "chat-agent.db", cid)
    for n in range(edits):
        start = (len(doc) - 20) * (n + 1) // (edits + 1)
        mark = db.mark()
        fake.enqueue(Reply([ToolUse("update_artifact", {"replacement": f"<{n:08d}>"})]), Reply("Done."),
                     when=main_only)
        await send(ws, type="message", content="change these words",
                   canvas={"highlight": {"start": start, "end": start + 10}})
        result.sent.append(max(await frames_until_done(ws), await frames_until_done(other)))
        stored, pages = db.added(mark)
        result.stored.append(stored)
        result.pages.append(pages)
    result.snapshots, result.versions = db.snapshots()
    await ws.close()
    await other.close()
    return result


async def read_every_version(path: Path, conversation_id: str, owner: str, count: int) -> list[float]:
    times = []
    async with SqliteStore(path) as store:
        for index in range(1, count + 1):
            began = time.perf_counter()
            version = await store.get_artifact_version(owner, conversation_id, index)
            times.append(time.perf_counter() - began)
            assert version is not None and version.index == index
    return times


def conversation_of(path: Path, chars: int) -> tuple[str, str]:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        row = db.execute("SELECT c.id, c.owner FROM conversations c JOIN artifact_versions v ON v.conversation_id = c.id"
                         " AND v.idx = 1 WHERE LENGTH(v.content) = ?", (chars,)).fetchone()
    return row[0], row[1]


def report(results: list[Result], reads: list[float]) -> bool:
    print(f"{'size':>7}  {'artifact frame':>14}  {'sent/client max':>15}  {'mean':>7}  "
          f"{'stored/edit mean':>16}  {'max':>9}  {'pages/edit':>10}  snapshots")
    for r in results:
        print(f"{r.label:>7}  {r.whole_frame:>14,}  {max(r.sent):>15,}  {statistics.mean(r.sent):>7,.0f}  "
              f"{statistics.mean(r.stored):>16,.0f}  {max(r.stored):>9,}  {statistics.mean(r.pages):>10,.0f}  "
              f"{r.snapshots} of {r.versions} versions")
    big = results[-1]
    print(f"\n{len(big.sent)} edits per size; the store snapshots every {MAX_CHAIN} deltas (or once deltas pass half "
          f"the content): the mean includes that snapshot, the median stored is {statistics.median(big.stored):,.0f} B.")
    print(f"reading each of the {len(reads)} versions of the 1 MB artifact: median {statistics.median(reads) * 1000:.1f}"
          f" ms, slowest {max(reads) * 1000:.1f} ms")
    sent, stored = max(big.sent), statistics.mean(big.stored)
    print(f"at 1 MB: {sent:,} B sent per client (target <= {SENT_TARGET:,}), {stored:,.0f} B stored per edit "
          f"(target <= {STORED_TARGET:,}); an `artifact` frame would be {big.whole_frame:,} B")
    return verdict("artifact scaling (worse of sent/20 KB, stored/100 KB at 1 MB)",
                   max(sent / SENT_TARGET, stored / STORED_TARGET), 1.0, higher_is_better=False)


async def main(args: argparse.Namespace) -> bool:
    with FakeAnthropic() as fake, tempfile.TemporaryDirectory() as tmp:
        env = {"ANTHROPIC_BASE_URL": fake.base_url, "ANTHROPIC_API_KEY": fake.api_key,
               "CHAT_AGENT_SMALL_MODEL": SMALL, "CHAT_AGENT_LOG_LEVEL": "WARNING",
               "CHAT_AGENT_SUMMARY_CHARS": "100000000", "CHAT_AGENT_MAX_CONTEXT_TOKENS": "100000000"}
        server = ServerProcess(Path(tmp) / "data", env).start()
        began = time.monotonic()
        try:
            results = [await run_size(server, fake, label, chars, args.edits) for label, chars in SIZES]
            path = server.data_dir / "chat-agent.db"
            conversation, owner = conversation_of(path, SIZES[-1][1])
            reads = await read_every_version(path, conversation, owner, results[-1].versions)
        finally:
            server.stop()
    print(f"(ran in {time.monotonic() - began:.0f} s)\n")
    return report(results, reads)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--edits", type=int, default=MAX_CHAIN + 8,
                        help="highlight edits per artifact size (default: the snapshot cadence + 8)")
    sys.exit(0 if asyncio.run(main(parser.parse_args())) else 1)

"""What was allocated between two tracemalloc snapshots (bench_server.py's BENCH_TRACEMALLOC),
per place, largest first; with --per N, divided by N (the sockets opened between them, say).

    python bench/alloc_diff.py before.1 after.2 [--per 1000] [--top 25] [--frames 3]
"""

from __future__ import annotations

import argparse
import tracemalloc


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before")
    parser.add_argument("after")
    parser.add_argument("--per", type=int, default=1)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--frames", type=int, default=3, help="frames of each place's traceback shown")
    args = parser.parse_args()
    before = tracemalloc.Snapshot.load(args.before)
    after = tracemalloc.Snapshot.load(args.after)
    diffs = after.compare_to(before, "traceback")
    total = sum(d.size_diff for d in diffs)
    print(f"allocated between them: {total / 1024:.1f} KiB in all, {total / args.per:.0f} bytes per {args.per}")
    for d in diffs[:args.top]:
        if d.size_diff <= 0:
            break
        where = " <- ".join(f"{f.filename.rsplit('/', 2)[-1]}:{f.lineno}" for f in list(d.traceback)[::-1][:args.frames])
        print(f"  {d.size_diff / args.per:8.0f} B {d.count_diff / args.per:6.2f} blocks  {where}")


if __name__ == "__main__":
    main()

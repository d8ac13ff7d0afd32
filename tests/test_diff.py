"""The line diff the model is shown for a change it did not make: applied to the version it
saw, it gives exactly the current one, and it stays small and fast for a small edit."""

from __future__ import annotations

import random
import re
import time

from chat_agent.context.diff import line_diff
from tests import pace

HUNK = re.compile(r"@@ -(\d+) \+(\d+) @@\n")


def apply(old: str, diff: str) -> str:
    """Applies the diff the way a reader would: hunks in order, context checked."""
    lines, out, at = old.splitlines(keepends=True), [], 0
    for match, body in zip(HUNK.finditer(diff), HUNK.split(diff)[3::3]):
        first = int(match.group(1)) - 1
        out += lines[at:first]
        at = first
        for line in body.splitlines(keepends=True):
            mark, text = line[0], line[1:]
            if mark in " -":
                assert lines[at] == text, (lines[at], text)
                at += 1
            if mark in " +":
                out.append(text)
    return "".join(out + lines[at:])


def test_a_small_edit_shows_its_lines_with_context():
    old = "".join(f"line {i}\n" for i in range(30))
    new = old.replace("line 5\n", "line five\n").replace("line 20\n", "")
    assert line_diff(old, new) == ("@@ -4 +4 @@\n line 3\n line 4\n-line 5\n+line five\n line 6\n line 7\n"
                                   "@@ -19 +19 @@\n line 18\n line 19\n-line 20\n line 21\n line 22\n")
    assert apply(old, line_diff(old, new)) == new


def test_no_change_is_an_empty_diff():
    assert line_diff("same\n", "same\n") == ""


def test_applying_the_diff_gives_the_new_version():
    rng = random.Random(7)
    words = ["alpha\n", "beta\n", "gamma\n", "\n", "## Heading\n", "delta\n"]
    for _ in range(300):
        old = [rng.choice(words) for _ in range(rng.randint(0, 40))]
        new = list(old)
        for _ in range(rng.randint(1, 4)):
            at = rng.randint(0, len(new))
            if new and rng.random() < 0.5:
                del new[min(at, len(new) - 1)]
            else:
                new.insert(at, rng.choice(words + ["inserted\n"]))
        assert apply("".join(old), line_diff("".join(old), "".join(new))) == "".join(new)


def test_a_small_edit_on_a_megabyte_is_small_and_fast():
    big = "".join(f"Paragraph {i}: " + "the canvas keeps every version " * 6 + "\n\nsame line\n\n"
                  for i in range(5_000))
    assert len(big) > 1_000_000
    started = time.perf_counter()
    diff = line_diff(big, big.replace("Paragraph 2500:", "Section 2500:"))
    assert time.perf_counter() - started < pace.scaled(0.5)
    assert "+Section 2500:" in diff and "-Paragraph 2500:" in diff and len(diff) < 1_500

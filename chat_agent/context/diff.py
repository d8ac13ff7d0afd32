"""A line diff between two versions of an artifact, as the model is shown a change it did
not make itself (the user's edit, a version the user selected).

Pure and bounded: the common head and tail are skipped in linear time and only the part
between them is compared line by line, so a small edit on a 1 MB artifact costs little.
"""

from __future__ import annotations

import difflib

CONTEXT_LINES = 2
MAX_COMPARED_LINES = 4_000  # a middle longer than this is shown as one replaced block


def _common_head(old: list[str], new: list[str]) -> int:
    n, limit = 0, min(len(old), len(new))
    while n < limit and old[n] == new[n]:
        n += 1
    return n


def _common_tail(old: list[str], new: list[str], head: int) -> int:
    n, limit = 0, min(len(old), len(new)) - head
    while n < limit and old[-1 - n] == new[-1 - n]:
        n += 1
    return n


def _opcodes(old: list[str], new: list[str]) -> list[tuple[str, int, int, int, int]]:
    """difflib's opcodes over the whole lists, computed on the differing middle only."""
    head = _common_head(old, new)
    tail = _common_tail(old, new, head)
    a_end, b_end = len(old) - tail, len(new) - tail
    codes: list[tuple[str, int, int, int, int]] = [("equal", 0, head, 0, head)] if head else []
    if a_end - head + b_end - head <= MAX_COMPARED_LINES:
        matcher = difflib.SequenceMatcher(None, old[head:a_end], new[head:b_end], autojunk=False)
        codes += [(tag, i1 + head, i2 + head, j1 + head, j2 + head) for tag, i1, i2, j1, j2 in matcher.get_opcodes()]
    elif a_end > head or b_end > head:
        codes.append(("replace", head, a_end, head, b_end))
    if tail:
        codes.append(("equal", a_end, len(old), b_end, len(new)))
    return codes


def _hunks(codes: list[tuple[str, int, int, int, int]]) -> list[list[tuple[str, int, int, int, int]]]:
    """Changes grouped with CONTEXT_LINES of unchanged lines around them, as in `diff -U2`."""
    hunks: list[list[tuple[str, int, int, int, int]]] = []
    current: list[tuple[str, int, int, int, int]] = []
    for tag, i1, i2, j1, j2 in codes:
        if tag != "equal":
            current.append((tag, i1, i2, j1, j2))
            continue
        if current:  # context after the last change, and maybe the end of this hunk
            if i2 - i1 > 2 * CONTEXT_LINES:
                current.append((tag, i1, i1 + CONTEXT_LINES, j1, j1 + CONTEXT_LINES))
                hunks.append(current)
                current = []
            else:
                current.append((tag, i1, i2, j1, j2))
                continue
        keep = min(CONTEXT_LINES, i2 - i1)
        current = [(tag, i2 - keep, i2, j2 - keep, j2)] if keep else []
    if any(tag != "equal" for tag, *_ in current):
        hunks.append(current)
    return hunks


def line_diff(old: str, new: str) -> str:
    """A unified-style diff (`@@ -line +line @@` hunks; ` ` kept, `-` removed, `+` added)."""
    a, b = old.splitlines(keepends=True), new.splitlines(keepends=True)
    out: list[str] = []
    for hunk in _hunks(_opcodes(a, b)):
        _, i1, _, j1, _ = hunk[0]
        out.append(f"@@ -{i1 + 1} +{j1 + 1} @@\n")
        for tag, i1, i2, j1, j2 in hunk:
            if tag == "equal":
                out += [" " + line for line in a[i1:i2]]
                continue
            out += ["-" + line for line in a[i1:i2]]
            out += ["+" + line for line in b[j1:j2]]
    # A last line without a newline would run into the next diff line.
    return "".join(line if line.endswith("\n") else line + "\n" for line in out)

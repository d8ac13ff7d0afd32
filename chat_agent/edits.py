"""Text edits as changes: what turns one artifact version into the next, small when the edit is.

A change is `(start, end, text)`: the characters `start:end` of the base (Python `str`
indices, i.e. Unicode code points, the unit of `message.canvas.highlight`) become `text`.
A list of changes is ascending and non-overlapping, every offset into the base: the form of
PROTOCOL 1.1's `artifact_edit.changes` and of a stored version delta.

Pure functions, no I/O: the canvas diffs, the store and the client apply.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

Change = tuple[int, int, str]

# Strings are compared a block at a time (in C), then within the block where they differ:
# a common prefix of a 1 MB artifact costs a few hundred slice comparisons, not a Python loop
# over a million characters.
_BLOCK = 4096


class EditError(ValueError):
    """Changes that do not fit their base: out of range, overlapping or out of order."""


def common_prefix(a: str, b: str) -> int:
    limit = min(len(a), len(b))
    i = 0
    while i < limit:
        step = min(_BLOCK, limit - i)
        if a[i:i + step] == b[i:i + step]:
            i += step
            continue
        while a[i] == b[i]:  # the first difference is within this block
            i += 1
        return i
    return limit


def common_suffix(a: str, b: str, limit: int) -> int:
    """The length of the common end of `a` and `b`, at most `limit`."""
    n, m, i = len(a), len(b), 0
    while i < limit:
        step = min(_BLOCK, limit - i)
        if a[n - i - step:n - i] == b[m - i - step:m - i]:
            i += step
            continue
        while a[n - i - 1] == b[m - i - 1]:
            i += 1
        return i
    return limit


def diff(old: str, new: str) -> list[Change]:
    """The changes that turn `old` into `new`: at most one, what lies between their common
    prefix and common suffix (so a span edit is exactly one change the size of its new text).
    O(n) in C-level comparisons; none when the two are equal."""
    if old == new:
        return []
    prefix = common_prefix(old, new)
    suffix = common_suffix(old, new, min(len(old), len(new)) - prefix)
    return [(prefix, len(old) - suffix, new[prefix:len(new) - suffix])]


def apply(base: str, changes: Iterable[Sequence[object]]) -> str:
    """`base` with `changes` applied (each `(start, end, text)`, offsets into `base`)."""
    pieces: list[str] = []
    at = 0
    for start, end, text in changes:
        if not (isinstance(start, int) and isinstance(end, int) and isinstance(text, str)):
            raise EditError(f"a change is (start, end, text), not ({start!r}, {end!r}, …)")
        if not at <= start <= end <= len(base):
            raise EditError(f"change [{start}, {end}) does not fit a base of {len(base)} characters "
                            f"after the previous change ending at {at}")
        pieces.append(base[at:start])
        pieces.append(text)
        at = end
    pieces.append(base[at:])
    return "".join(pieces)


def size(changes: Iterable[Change]) -> int:
    """The characters the changes carry: what sending them costs, beside the offsets."""
    return sum(len(text) for _, _, text in changes)

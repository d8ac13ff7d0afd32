"""The one difference in SQL text that both backends' shared statements keep: placeholders.

The statements of writes.py, reads.py and leases.py are written once, in the SQL that
SQLite and PostgreSQL both accept (`IS DISTINCT FROM`, `FALSE`, aliased subqueries, a
`CAST` where PostgreSQL could not infer a parameter's type), with SQLite's placeholders:
numbered `?1`, `?2`… or plain `?`. PostgreSQL's are `$1`, `$2`… (psycopg's raw cursor
sends them as they are), and this module turns the one into the other.
"""

from __future__ import annotations

import re
from functools import lru_cache

_PLACEHOLDER = re.compile(r"\?(\d*)")
_LITERAL = re.compile(r"('(?:[^']|'')*')")  # a quoted string: its text is left alone


@lru_cache(maxsize=512)
def to_postgres(sql: str) -> str:
    """`sql` with `?N` as `$N` and the plain `?` numbered in order (one statement uses one
    style); what is inside string literals is left as it is."""
    parts = _LITERAL.split(sql)  # code at even indexes, literals at odd ones
    styles = {bool(n) for part in parts[::2] for n in _PLACEHOLDER.findall(part)}
    if len(styles) > 1:
        raise ValueError(f"numbered and plain placeholders mixed: {sql!r}")
    counter = iter(range(1, sql.count("?") + 1))

    def number(match: re.Match[str]) -> str:
        return f"${match.group(1) or next(counter)}"

    return "".join(part if i % 2 else _PLACEHOLDER.sub(number, part) for i, part in enumerate(parts))

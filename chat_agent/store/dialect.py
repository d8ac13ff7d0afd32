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


@lru_cache(maxsize=512)
def to_postgres(sql: str) -> str:
    """`sql` with `?N` as `$N` and the plain `?` numbered in order. One statement uses one
    style; no literal in our statements holds a question mark."""
    if "'" in sql and re.search(r"'[^']*\?[^']*'", sql):
        raise ValueError(f"a question mark inside a literal is ambiguous: {sql!r}")
    styles = {bool(n) for n in _PLACEHOLDER.findall(sql)}
    if len(styles) > 1:
        raise ValueError(f"numbered and plain placeholders mixed: {sql!r}")
    counter = iter(range(1, sql.count("?") + 1))
    return _PLACEHOLDER.sub(lambda m: f"${m.group(1) or next(counter)}", sql)

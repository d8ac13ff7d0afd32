"""Conversation leases as SQL both backends run: one statement per operation.

A lease row is never deleted: releasing it empties `instance` (free) and keeps `epoch`, so
an epoch is never handed out twice for one conversation, which is what makes it a fencing
token. A row carries no reference to its conversation: a lease is taken before the
conversation it guards is created, and outlives its deletion harmlessly.

`{now}` is the current time in unix seconds as SQL: on SQLite a parameter from the
process clock (the processes sharing a file share a machine), on PostgreSQL the database's
clock, which every instance agrees on whatever machine it runs on.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from chat_agent.store.dialect import to_postgres
from chat_agent.store.records import Lease

FREE = ""  # `instance` of a released lease

_COLUMNS = "conversation_id, instance, epoch, expires_at"

# The conflict branch runs under the row's lock, and its WHERE is checked against the
# newest committed row, so of concurrent claimers exactly one gets a row back.
CLAIM = (
    f"INSERT INTO leases ({_COLUMNS}) VALUES (?1, ?2, 1, {{now}} + ?3)"
    " ON CONFLICT (conversation_id) DO UPDATE SET instance = excluded.instance,"
    " epoch = CASE WHEN leases.instance = excluded.instance THEN leases.epoch ELSE leases.epoch + 1 END,"
    " expires_at = excluded.expires_at"
    " WHERE leases.instance IN ('', excluded.instance) OR leases.expires_at <= {now}"
    f" RETURNING {_COLUMNS}"
)
# The leases the instance holds (?3, a JSON array of ids) and still has, expired or not: one
# that expired while nobody took it (the instance was cut off from the database) is still its
# own, at the same epoch, so what it wrote meanwhile can still be stored. On PostgreSQL the
# rows are locked in id order first ({lock}), the order in which a fenced apply share-locks
# them: a renewal and an apply of one instance never deadlock.
RENEW = (
    "UPDATE leases SET expires_at = {now} + ?2 WHERE conversation_id IN (SELECT conversation_id"
    " FROM leases WHERE instance = ?1 AND conversation_id IN ({ids}) ORDER BY conversation_id{lock})"
    " AND instance = ?1"
    f" RETURNING {_COLUMNS}"
)
RELEASE = (
    "UPDATE leases SET instance = '', expires_at = 0"
    " WHERE conversation_id = ?1 AND instance = ?2 AND epoch = ?3 AND instance <> ''"
)
GET = f"SELECT {_COLUMNS} FROM leases WHERE conversation_id = ?1 AND instance <> ''"
# Every instance holds a lease of its own while it runs (see sessions/ownership.py).
LIVE_INSTANCES = "SELECT DISTINCT instance FROM leases WHERE instance <> '' AND expires_at > {now} ORDER BY instance"
EXPIRED = (
    f"SELECT {_COLUMNS} FROM leases WHERE instance <> '' AND expires_at <= {{now}}"
    " ORDER BY expires_at, conversation_id LIMIT ?1"
)

_NUMBERED = re.compile(r"\?(\d+)")


def for_sqlite(template: str) -> str:
    """The statement with `{now}` as the parameter after its others (pass `time.time()` last)."""
    template = template.replace("{ids}", "SELECT value FROM json_each(?3)")
    after = max((int(n) for n in _NUMBERED.findall(template)), default=0) + 1
    return template.format(now=f"?{after}", lock="")


PG_NOW = "CAST(EXTRACT(EPOCH FROM clock_timestamp()) AS DOUBLE PRECISION)"


def for_postgres(template: str) -> str:
    return to_postgres(template.format(now=PG_NOW, lock=" FOR UPDATE",
                                       ids="SELECT json_array_elements_text(CAST(?3 AS json))"))


def check_instance(instance: str) -> None:
    if not instance:
        raise ValueError("an instance needs a name: the empty one marks a free lease")


def lease(row: Sequence[Any]) -> Lease:
    conversation_id, instance, epoch, expires_at = row
    return Lease(conversation_id, instance, int(epoch), float(expires_at))


def fenced_out(fences: dict[str, tuple[str, int]], held: Sequence[Sequence[Any]]) -> list[str]:
    """The fenced conversations whose lease row (`held`: id, instance, epoch) is not the fence's."""
    rows = {cid: (instance, int(epoch)) for cid, instance, epoch in held}
    return [cid for cid, fence in fences.items() if rows.get(cid) != (fence[0], int(fence[1]))]

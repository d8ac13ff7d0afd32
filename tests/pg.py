"""PostgreSQL for the tests: the machine's server at 127.0.0.1:5432, database `test`, trust
auth. Each test gets a schema of its own, dropped afterwards; its URL carries the schema in
libpq's `options`, so a child server process given that URL works in it too.

Where the server cannot be reached the test skips and says why, unless
CHAT_AGENT_REQUIRE_SERVICES=1 (CI), where that is a failure.
"""

from __future__ import annotations

import getpass
import os
import secrets
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from functools import cache
from typing import Any
from urllib.parse import quote

import psycopg
import pytest

HOST, PORT, DATABASE = "127.0.0.1", 5432, "test"
REQUIRED = os.environ.get("CHAT_AGENT_REQUIRE_SERVICES") == "1"


@cache
def _server() -> tuple[str | None, str]:
    """The base URL of the first user that connects, or None and why none did."""
    errors = []
    for user in dict.fromkeys(("postgres", getpass.getuser())):
        url = f"postgresql://{user}@{HOST}:{PORT}/{DATABASE}"
        try:
            with psycopg.connect(url, connect_timeout=3):
                return url, ""
        except psycopg.Error as exc:
            errors.append(f"{user}: {' '.join(str(exc).split())}")
    return None, "; ".join(errors)


def server_url() -> str:
    """The base URL (schema `public`); skips (or fails, under CI) without a server."""
    url, why = _server()
    if url is None:
        message = f"PostgreSQL at {HOST}:{PORT}/{DATABASE} is unreachable ({why})"
        if REQUIRED:
            pytest.fail(message + " and CHAT_AGENT_REQUIRE_SERVICES=1")
        pytest.skip(message)
    return url


def schema_url(schema: str) -> str:
    """The URL of `schema` in the test database: tables go there, and only there."""
    return f"{server_url()}?options={quote(f'-csearch_path={schema}', safe='')}"


@contextmanager
def isolated_database() -> Iterator[str]:
    """A fresh, empty schema; yields a URL to it (for a store, `create_store`, or a child
    server's CHAT_AGENT_DATABASE_URL), and drops it with everything in it afterwards."""
    schema = f"t_{secrets.token_hex(6)}"
    base = server_url()
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield schema_url(schema)
    finally:
        _drop(base, schema)


# Backends holding locks in a schema: a killed server's connection that PostgreSQL has not
# noticed is gone yet, or a child server still closing, can deadlock with the DROP.
_HOLDERS = """SELECT DISTINCT l.pid FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s AND l.pid <> pg_backend_pid()"""


def _drop(base: str, schema: str, attempts: int = 5) -> None:
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute("SET lock_timeout = '3s'")
        for attempt in range(attempts):
            try:
                conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
                return
            except (psycopg.errors.DeadlockDetected, psycopg.errors.LockNotAvailable):
                if attempt == attempts - 1:
                    raise
                for (pid,) in conn.execute(_HOLDERS, (schema,)).fetchall():
                    conn.execute("SELECT pg_terminate_backend(%s)", (pid,))


def query(url: str, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    """Runs one statement (with `$1` placeholders) on a connection of its own, as an
    operator would beside the store; returns its rows, if any."""
    with psycopg.connect(url, autocommit=True, cursor_factory=psycopg.RawCursor) as conn:
        cursor = conn.execute(sql, params)
        return cursor.fetchall() if cursor.description else []


@pytest.fixture
def pg_url() -> Iterator[str]:
    """The URL of a fresh schema of the test database, dropped after the test."""
    with isolated_database() as url:
        yield url

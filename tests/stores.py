"""Both store backends behind one fixture: the store tests run once on a SQLite file and once
on a PostgreSQL schema of their own (tests/pg.py), and look at the rows through `sql`."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from chat_agent.store import PostgresStore, SqliteStore, Store
from chat_agent.store.dialect import to_postgres
from tests import pg

BACKENDS = ("sqlite", "postgres")


class Backend:
    """Where one test's database lives; `new()` opens another store on it."""

    def __init__(self, name: str, where: Path | str):
        self.name, self.where = name, where

    def __repr__(self) -> str:
        return self.name

    @property
    def url(self) -> str:
        return f"sqlite:///{self.where}" if self.name == "sqlite" else str(self.where)

    def new(self, **postgres: Any) -> Store:
        """A store on this database; `postgres` goes to PostgresStore only."""
        return SqliteStore(self.where) if self.name == "sqlite" else PostgresStore(str(self.where), **postgres)

    def sql(self, query: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """One statement with SQLite's placeholders, run beside the store on a connection of
        its own (committed at once), as an operator or a second process would."""
        if self.name == "postgres":
            return pg.query(str(self.where), to_postgres(query), params)
        with sqlite3.connect(self.where) as db:
            return db.execute(query, params).fetchall()

    def count(self, table: str) -> int:
        return self.sql(f"SELECT COUNT(*) FROM {table}")[0][0]

    @property
    def integrity_error(self) -> type[Exception]:
        """What the driver raises for a broken constraint outside the store."""
        import psycopg

        return sqlite3.IntegrityError if self.name == "sqlite" else psycopg.errors.IntegrityError


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    if request.param == "sqlite":
        yield Backend("sqlite", tmp_path / "chat.db")
        return
    with pg.isolated_database() as url:
        yield Backend("postgres", url)

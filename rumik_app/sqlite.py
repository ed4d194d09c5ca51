"""`SQLiteStore`: the one base of every SQLite database the project keeps (jobs, ratings, campaigns).

    class JobStore(SQLiteStore):
        SCHEMA = "CREATE TABLE IF NOT EXISTS jobs (...);"     # idempotent
    store = JobStore(root / "jobs.sqlite3")                  # created owner-only, WAL, schema and meta row
    with store._transaction() as con:                        # BEGIN IMMEDIATE ... COMMIT (ROLLBACK on error)
        con.execute("INSERT INTO jobs VALUES (...)")
    with store._connect() as con:                            # a fresh connection for reads
        con.execute("SELECT ...").fetchall()

Durability rules, the same for every store: WAL journal with `synchronous=FULL`, foreign keys
on, a fresh connection per call (safe across threads and processes, since no connection is
shared), and writes in `BEGIN IMMEDIATE` transactions, so a write is acknowledged only after
COMMIT returns and a server killed afterwards loses nothing acknowledged. The file is
created owner-only (SQLite gives its -wal and -shm files the database's mode): the stores
hold people's texts, ratings and names. Several stores may share one file (the campaign
tables live beside the ratings): each adds its `SCHEMA` and its own `meta` row.

Light: the standard library only.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path

BUSY_TIMEOUT_S = 30.0  # a writer waits this long for another's transaction before "database is locked"
PRIVATE_MODE = 0o600
META_SCHEMA = "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);\n"


class SQLiteStore:
    """One SQLite database file with the rules above. Subclasses set `SCHEMA` (idempotent
    `CREATE ... IF NOT EXISTS` statements) and `SCHEMA_KEY`/`SCHEMA_VERSION` for their `meta` row."""

    SCHEMA = ""
    SCHEMA_KEY = "schema_version"
    SCHEMA_VERSION = 1

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        os.close(os.open(self.path, os.O_CREAT | os.O_WRONLY, PRIVATE_MODE))
        os.chmod(self.path, PRIVATE_MODE)
        with self._connect() as con:
            con.execute("PRAGMA journal_mode=WAL")
            con.executescript(META_SCHEMA + self.SCHEMA)
            con.execute("INSERT OR IGNORE INTO meta VALUES (?, ?)", (self.SCHEMA_KEY, str(self.SCHEMA_VERSION)))

    @contextlib.contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        con = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
        try:
            con.execute("PRAGMA synchronous=FULL")
            con.execute("PRAGMA foreign_keys=ON")
            yield con
        finally:
            con.close()

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._connect() as con:
            con.execute("BEGIN IMMEDIATE")
            try:
                yield con
            except BaseException:
                con.execute("ROLLBACK")
                raise
            con.execute("COMMIT")

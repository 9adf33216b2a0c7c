"""The embedded local store of a partition's state: SQLite (the standard library's sqlite3),
one file per partition, a table of keys and values and a table of positions.

It is a cache of a compacted changelog topic, never the truth: `open_store` checks the
file (`PRAGMA quick_check`) and, when it is missing, unreadable or corrupt, deletes it and
starts empty (`rebuilt`), and its owner restores from the changelog's beginning. Why
SQLite (measured against DuckDB and RocksDB): docs/design.md#rule-state.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterable, Iterator
from pathlib import Path

__all__ = ["StateStore", "open_store"]

log = logging.getLogger(__name__)

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS kv (key TEXT PRIMARY KEY, value BLOB NOT NULL) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL)",
)


class StateStore:
    """One partition's keys and values, and named integers (the changelog checkpoint, the
    rules position); every `write` is one transaction."""

    def __init__(self, path: Path, db: sqlite3.Connection, *, rebuilt: bool) -> None:
        self.path = path
        self.rebuilt = rebuilt
        self._db = db

    def items(self) -> Iterator[tuple[str, bytes]]:
        """Every key and its value."""
        yield from self._db.execute("SELECT key, value FROM kv")

    def get(self, key: str) -> bytes | None:
        """One key's value, or None."""
        row = self._db.execute("SELECT value FROM kv WHERE key = ?", (key,)).fetchone()
        return None if row is None else bytes(row[0])

    def meta(self, name: str) -> int | None:
        """A named integer, or None."""
        row = self._db.execute("SELECT value FROM meta WHERE name = ?", (name,)).fetchone()
        return None if row is None else int(row[0])

    def write(self, records: Iterable[tuple[str, bytes | None]],
              meta: dict[str, int] | None = None) -> None:
        """Put (a value) or delete (None) each key, and set the named integers, in one
        transaction."""
        puts: list[tuple[str, bytes]] = []
        deletes: list[tuple[str]] = []
        for key, value in records:
            if value is None:
                deletes.append((key,))
            else:
                puts.append((key, value))
        with self._db:
            if deletes:
                self._db.executemany("DELETE FROM kv WHERE key = ?", deletes)
            if puts:
                self._db.executemany(
                    "INSERT INTO kv (key, value) VALUES (?, ?) "
                    "ON CONFLICT(key) DO UPDATE SET value = excluded.value", puts)
            if meta:
                self._db.executemany(
                    "INSERT INTO meta (name, value) VALUES (?, ?) "
                    "ON CONFLICT(name) DO UPDATE SET value = excluded.value",
                    list(meta.items()))

    def clear(self) -> None:
        """Forget every key and named integer (a store that outlived its changelog)."""
        with self._db:
            self._db.execute("DELETE FROM kv")
            self._db.execute("DELETE FROM meta")
        self.rebuilt = True

    def close(self) -> None:
        """Close the file (what was written stays)."""
        self._db.close()


def _files(path: Path) -> list[Path]:
    return [path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm"),
            path.with_name(path.name + "-journal")]


def _connect(path: Path) -> sqlite3.Connection:
    db = sqlite3.connect(path, isolation_level="DEFERRED", check_same_thread=False)
    # WAL with synchronous=NORMAL: a commit is durable against a process crash (what the
    # worker's SIGKILL is), and a power loss may lose the last commits, which the changelog
    # still has.
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    for statement in _SCHEMA:
        db.execute(statement)
    return db


def _sound(db: sqlite3.Connection) -> bool:
    rows = db.execute("PRAGMA quick_check").fetchall()
    return rows == [("ok",)]


def open_store(path: Path) -> StateStore:
    """The store at `path`, checked; when it is missing, unreadable or fails the check, its
    files are deleted and it starts empty, with `rebuilt` set (the caller restores it from
    the changelog's beginning)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    existed = path.exists()
    if existed:
        try:
            db = _connect(path)
            if _sound(db) and db.execute("SELECT count(*) FROM meta").fetchone() is not None:
                return StateStore(path, db, rebuilt=False)
            db.close()
            log.warning("state store %s failed its check; rebuilding it from the changelog",
                        path)
        except sqlite3.DatabaseError as exc:
            log.warning("state store %s cannot be read (%s); rebuilding it from the "
                        "changelog", path, exc)
    for file in _files(path):
        file.unlink(missing_ok=True)
    return StateStore(path, _connect(path), rebuilt=True)

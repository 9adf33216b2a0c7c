"""A process's local copy of the index partitions it has read: SQLite, beside its other state.

`TenantIndex` reads an index partition from where it last stopped; without a local copy, a
fresh process starts every partition at offset 0 (1/31 of a tenant's index, about 130,000
records at a million envelopes, on its first look-up). This store keeps, per index topic, the
entries read so far and, in the same transaction, the offset each partition was read to, so
the next process on the machine reads only what was written since.

Kafka stays the source of truth: the store is a cache. A store that cannot be opened, or
turns out corrupt, is deleted and read again from the topic; a partition whose recorded
position is past the topic's end (the topic was deleted and created again) is dropped and
read from its start. Several processes may share one file (SQLite's WAL mode; each applies
what it read, and the same records applied twice give the same rows).
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path

__all__ = ["IndexStore"]

log = logging.getLogger(__name__)

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS entries (key BLOB PRIMARY KEY, part INTEGER NOT NULL, "
    "value BLOB NOT NULL) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS positions (part INTEGER PRIMARY KEY, next INTEGER NOT NULL)",
)


class IndexStore:
    """Entries of an index topic by key, and how far each partition has been read.

    `path` None keeps them in memory (a process with no writable state directory). Methods
    are thread-safe; callers hold their own lock around a read-then-apply.
    """

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._db = self._connect()
        self.resets = 0

    def _connect(self) -> sqlite3.Connection:
        if self.path is None:
            return self._prepared(sqlite3.connect(":memory:", check_same_thread=False,
                                                  isolation_level=None))
        for attempt in (0, 1):
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                db = sqlite3.connect(self.path, timeout=30.0, check_same_thread=False,
                                     isolation_level=None)
                db.execute("PRAGMA journal_mode=WAL")
                db.execute("PRAGMA synchronous=NORMAL")
                return self._prepared(db)
            except (OSError, sqlite3.DatabaseError) as exc:
                if attempt:
                    log.warning("index store %s unusable (%s): keeping the index in memory",
                                self.path, exc)
                    break
                log.warning("index store %s unusable (%s): deleting it", self.path, exc)
                self._delete_files()
        self.path = None
        return self._prepared(sqlite3.connect(":memory:", check_same_thread=False,
                                              isolation_level=None))

    @staticmethod
    def _prepared(db: sqlite3.Connection) -> sqlite3.Connection:
        for statement in _SCHEMA:
            db.execute(statement)
        db.execute("SELECT count(*) FROM positions").fetchone()  # a corrupt file fails here
        return db

    def _delete_files(self) -> None:
        if self.path is None:
            return
        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(OSError):  # nothing there, or no directory at all
                Path(f"{self.path}{suffix}").unlink(missing_ok=True)

    def _reset(self, exc: sqlite3.DatabaseError) -> None:
        """A store found corrupt while in use: start again, empty (the topic has it all)."""
        log.warning("index store %s failed (%s): rebuilding it from the index topic",
                    self.path, exc)
        self.resets += 1
        with contextlib.suppress(sqlite3.Error):
            self._db.close()
        self._delete_files()
        self._db = self._connect()

    def position(self, partition: int) -> int:
        """The offset partition `partition` has been read to (0: never)."""
        with self._lock:
            try:
                row = self._db.execute("SELECT next FROM positions WHERE part = ?",
                                       (partition,)).fetchone()
            except sqlite3.DatabaseError as exc:
                self._reset(exc)
                return 0
        return int(row[0]) if row else 0

    def get(self, key: bytes) -> bytes | None:
        """The value stored under `key`, if any."""
        with self._lock:
            try:
                row = self._db.execute("SELECT value FROM entries WHERE key = ?",
                                       (key,)).fetchone()
            except sqlite3.DatabaseError as exc:
                self._reset(exc)
                return None
        return bytes(row[0]) if row else None

    def with_prefix(self, prefix: bytes) -> dict[bytes, bytes]:
        """Every entry whose key starts with `prefix` (the cursors: a few dozen)."""
        upper = prefix[:-1] + bytes([prefix[-1] + 1])
        with self._lock:
            try:
                rows = self._db.execute("SELECT key, value FROM entries WHERE key >= ? AND "
                                        "key < ?", (prefix, upper)).fetchall()
            except sqlite3.DatabaseError as exc:
                self._reset(exc)
                return {}
        return {bytes(k): bytes(v) for k, v in rows}

    def apply(self, partition: int, records: Sequence[tuple[bytes, bytes | None]],
              next_offset: int, *, keep_first: tuple[bytes, ...] = ()) -> None:
        """Apply records read from `partition` in order (a None value is a tombstone) and
        record that it has been read to `next_offset`, in one transaction. Keys starting
        with one of `keep_first` keep the value they were first stored with."""
        puts = [(k, partition, v) for k, v in records if v is not None and
                not (keep_first and k.startswith(keep_first))]
        firsts = [(k, partition, v) for k, v in records if v is not None and
                  keep_first and k.startswith(keep_first)]
        deletes = [(k,) for k, v in records if v is None]
        with self._lock:
            try:
                db = self._db
                db.execute("BEGIN IMMEDIATE")
                try:
                    if deletes:
                        db.executemany("DELETE FROM entries WHERE key = ?", deletes)
                    if firsts:
                        db.executemany("INSERT OR IGNORE INTO entries VALUES (?, ?, ?)", firsts)
                    if puts:
                        db.executemany("INSERT OR REPLACE INTO entries VALUES (?, ?, ?)", puts)
                    db.execute("INSERT INTO positions VALUES (?, ?) ON CONFLICT(part) DO "
                               "UPDATE SET next = max(next, excluded.next)",
                               (partition, next_offset))
                    db.execute("COMMIT")
                except BaseException:
                    db.execute("ROLLBACK")
                    raise
            except sqlite3.DatabaseError as exc:
                self._reset(exc)

    def drop_partition(self, partition: int) -> None:
        """Forget a partition (its topic was made again): it is read from its start."""
        with self._lock:
            try:
                self._db.execute("DELETE FROM entries WHERE part = ?", (partition,))
                self._db.execute("DELETE FROM positions WHERE part = ?", (partition,))
            except sqlite3.DatabaseError as exc:
                self._reset(exc)

    def close(self) -> None:
        """Close the file."""
        with self._lock:
            self._db.close()

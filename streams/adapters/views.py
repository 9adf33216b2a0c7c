"""A tenant's materialized read view in an embedded SQLite file (stdlib sqlite3, WAL).

    store = ViewStore(path, tenant="acme", topic="fs.acme.events")
    store.open()                              # a file it cannot trust is rebuilt empty
    store.apply(rows, skipped, next_offsets)  # one transaction: rows and checkpoint together
    store.runs("prod", rule="ops:error-spike", limit=50, before=None)

Tables (every row keyed by its event's position, `streams.core.viewrows.position`, so a
record applied twice changes nothing):

- `events`: every event: id, workspace, type, time and its raw value (Confluent-framed Avro),
  its chain's key (`streams.core.viewrows.chain_key` of its correlation id: one chain's
  events are an index range), and whether it is an application event that starts its chain
  (a partial index pages those: the chains a queue offers);
- `runs`: the first `run_started` of each run id, by workspace (indexed by rule and time);
- `firings`: the first `rule_fired` of each firing id, by workspace (indexed by rule and time);
- `feedback`: every `feedback_given`, indexed by type, participant and time;
- `verdicts`: the latest `feedback_given` of each participant on each target and type, its
  value as JSON (queues of targets a judge scored low, or where a judge and people differ);
- `caused`: run membership, (event, run) for every event a run's `run_started` caused,
  directly or through other events (a RunRecord's `emitted`), and the run's own root row;
- `checkpoint`: per events partition, the next offset to read, written in the same
  transaction as the rows of each batch, so the view is never ahead of or behind it;
- `skipped`: records that could not be decoded, with the reason (the worker's mirror
  dead-letters them; the view counts and skips them);
- `meta`: the layout version, tenant and topic the file was built for.

A file that is not a database, is corrupt, or was built for another layout, tenant or topic is
not trusted: `open` removes it and starts empty (the keeper then rebuilds it from the topic);
corruption found later raises `ViewCorrupt` for the keeper to do the same.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from streams.core.errors import StreamsError
from streams.core.viewrows import PageKey, Rows, chain_key, position, seq_of

__all__ = ["LAYOUT_VERSION", "RawEvent", "RunParts", "ViewCorrupt", "ViewStore"]

log = logging.getLogger(__name__)

LAYOUT_VERSION = "4"
"""Bumped when the tables change: a file of another layout is rebuilt from the topic (2 added
the firings' rule and time, the chains and the verdicts; 3 shadow versions' verdicts, the
person verdicts' index and workspaces, and the calibration alarms; 4 each event's chain key,
so a chain's events are read from the view)."""

_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE events (pos INTEGER PRIMARY KEY, event_id TEXT NOT NULL, workspace TEXT NOT NULL,
                     event_type TEXT NOT NULL, time_ms INTEGER NOT NULL, raw BLOB NOT NULL,
                     chain INTEGER NOT NULL, chain_key INTEGER NOT NULL);
CREATE INDEX events_by_id ON events (event_id);
CREATE INDEX events_by_chain ON events (chain_key);
CREATE TABLE runs (workspace TEXT NOT NULL, run_id TEXT NOT NULL, rule TEXT NOT NULL,
                   firing_id TEXT NOT NULL, time_ms INTEGER NOT NULL, pos INTEGER NOT NULL,
                   PRIMARY KEY (workspace, run_id)) WITHOUT ROWID;
CREATE INDEX runs_by_rule ON runs (workspace, rule, time_ms, pos);
CREATE INDEX runs_by_time ON runs (workspace, time_ms, pos);
CREATE TABLE firings (workspace TEXT NOT NULL, firing_id TEXT NOT NULL, rule TEXT NOT NULL,
                      time_ms INTEGER NOT NULL, pos INTEGER NOT NULL,
                      PRIMARY KEY (workspace, firing_id)) WITHOUT ROWID;
CREATE INDEX firings_by_rule ON firings (workspace, rule, time_ms, pos);
CREATE INDEX chains_by_time ON events (workspace, time_ms, pos) WHERE chain = 1;
CREATE TABLE feedback (pos INTEGER PRIMARY KEY, workspace TEXT NOT NULL,
                       feedback_type TEXT NOT NULL, participant TEXT NOT NULL,
                       time_ms INTEGER NOT NULL);
CREATE INDEX feedback_by_both ON feedback (workspace, feedback_type, participant, time_ms, pos);
CREATE INDEX feedback_by_type ON feedback (workspace, feedback_type, time_ms, pos);
CREATE INDEX feedback_by_participant ON feedback (workspace, participant, time_ms, pos);
CREATE INDEX feedback_by_time ON feedback (workspace, time_ms, pos);
CREATE TABLE verdicts (workspace TEXT NOT NULL, feedback_type TEXT NOT NULL,
                       target_kind TEXT NOT NULL, target_id TEXT NOT NULL,
                       participant TEXT NOT NULL, evaluator TEXT, person INTEGER NOT NULL,
                       value TEXT NOT NULL, time_ms INTEGER NOT NULL, pos INTEGER NOT NULL,
                       shadow INTEGER NOT NULL,
                       PRIMARY KEY (workspace, feedback_type, target_kind, target_id,
                                    participant)) WITHOUT ROWID;
CREATE INDEX verdicts_by_evaluator ON verdicts (workspace, feedback_type, target_kind,
                                                evaluator, time_ms, pos);
CREATE INDEX verdicts_by_participant ON verdicts (workspace, feedback_type, target_kind,
                                                  participant, time_ms, pos);
CREATE INDEX verdicts_by_person ON verdicts (workspace, person, time_ms, pos);
CREATE TABLE people_workspaces (workspace TEXT PRIMARY KEY) WITHOUT ROWID;
CREATE TABLE alarms (workspace TEXT NOT NULL, evaluator TEXT NOT NULL,
                     feedback_type TEXT NOT NULL, field TEXT NOT NULL, raised INTEGER NOT NULL,
                     episode INTEGER NOT NULL, time_ms INTEGER NOT NULL, pos INTEGER NOT NULL,
                     PRIMARY KEY (workspace, evaluator, feedback_type, field)) WITHOUT ROWID;
CREATE TABLE caused (event_id TEXT NOT NULL, run_id TEXT NOT NULL, workspace TEXT NOT NULL,
                     pos INTEGER NOT NULL, PRIMARY KEY (event_id, run_id)) WITHOUT ROWID;
CREATE INDEX caused_by_run ON caused (run_id, pos);
CREATE TABLE checkpoint (partition INTEGER PRIMARY KEY, next_offset INTEGER NOT NULL);
CREATE TABLE skipped (pos INTEGER PRIMARY KEY, reason TEXT NOT NULL);
"""


class ViewCorrupt(StreamsError):
    """The view's file is damaged (or vanished): rebuild it from the topic, never trust it."""


@dataclass(frozen=True, slots=True)
class RawEvent:
    """One stored event: its partition, offset, time and raw value."""

    partition: int
    offset: int
    time_ms: int
    raw: bytes


@dataclass(frozen=True, slots=True)
class RunParts:
    """What a run record is built from: its first `run_started`, its firing and the events
    it caused, in log order."""

    run_id: str
    started: RawEvent
    fired: RawEvent | None
    emitted: list[RawEvent]


# Per item kind: its table, its id column, the condition that picks its rows, and whether it
# has a rule (constants, never input).
_ITEMS = {"run": ("runs", "run_id", "1", True),
          "firing": ("firings", "firing_id", "1", True),
          "chain": ("events", "event_id", "chain = 1", False)}


def _items_where(kind: str, workspace: str, rule: str | None,
                 ) -> tuple[str, str, list[str], list[object]]:
    """The table, id column, WHERE conditions and their arguments of a kind of items of a
    workspace (of `rule`); ValueError for an unknown kind or a rule on chains."""
    if kind not in _ITEMS:
        raise ValueError(f"no items of kind {kind!r}: one of {sorted(_ITEMS)}")
    table, id_column, picked, ruled = _ITEMS[kind]
    where: list[str] = ["workspace = ?", picked]
    args: list[object] = [workspace]
    if rule is not None:
        if not ruled:
            raise ValueError(f"{kind} items have no rule")
        where.append("rule = ?")
        args.append(rule)
    return table, id_column, where, args


def _json_path(field: str) -> str:
    # A field of a verdict's value in SQLite's JSON path syntax, quoted (feedback fields are
    # Python identifiers; SQLite's quoted labels have no escape for a quote).
    if '"' in field:
        raise ValueError(f"no JSON path for a field named {field!r}")
    return f'$."{field}"'


def _raw(pos: int, time_ms: int, raw: bytes) -> RawEvent:
    partition, offset = seq_of(pos)
    return RawEvent(partition, offset, time_ms, raw)


def _corrupt(exc: sqlite3.DatabaseError) -> bool:
    # Damage shows as SQLITE_CORRUPT or SQLITE_NOTADB (a plain DatabaseError); a locked or
    # busy database is an OperationalError and is not damage.
    name = getattr(exc, "sqlite_errorname", "")
    return name in ("SQLITE_CORRUPT", "SQLITE_NOTADB") or type(exc) is sqlite3.DatabaseError


class ViewStore:
    """One tenant's view file; thread-safe (one connection behind a lock)."""

    def __init__(self, path: Path, *, tenant: str, topic: str) -> None:
        self.path = path
        self.tenant = tenant
        self.topic = topic
        self.rebuilt: list[str] = []  # why the file was started afresh, oldest first
        self._db: sqlite3.Connection | None = None
        self._inode: int | None = None
        self._lock = threading.RLock()

    # -- opening and trusting ---------------------------------------------------------------

    def open(self) -> None:
        """Open the file, or start it afresh when it is missing, damaged, or not this
        tenant's view of this layout (the reason is logged and kept in `rebuilt`)."""
        with self._lock:
            self._close()
            self.path.parent.mkdir(parents=True, exist_ok=True)
            reason = None
            try:
                reason = self._connect()
            except sqlite3.DatabaseError as exc:
                reason = f"unreadable ({exc})"
            if reason is not None:
                self.reset(reason)

    def _connect(self) -> str | None:
        db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False,
                             timeout=60.0)
        self._db = db
        db.execute("PRAGMA journal_mode=WAL")
        # WAL with NORMAL: a killed process loses nothing committed; a power loss may lose
        # the newest batches, never consistency (they are read again from the checkpoint).
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute("PRAGMA cache_size=-65536")
        self._inode = os.stat(self.path).st_ino
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if not tables:
            self._create()
            return None
        if "meta" not in tables:
            return "it has no meta table"
        meta = dict(db.execute("SELECT key, value FROM meta").fetchall())
        wanted = {"layout": LAYOUT_VERSION, "tenant": self.tenant, "topic": self.topic}
        if meta != wanted:
            return f"it was built as {meta}, not {wanted}"
        # A cheap structural look at the tables a read touches first; damage elsewhere shows
        # as ViewCorrupt when a query reaches it.
        db.execute("SELECT count(*) FROM checkpoint").fetchone()
        return None

    def _create(self) -> None:
        db = self._conn()
        db.execute("BEGIN IMMEDIATE")
        try:
            tables = {r[0] for r in db.execute(
                "SELECT name FROM sqlite_master WHERE type='table'")}
            if not tables:  # another process may have created it meanwhile
                for statement in _SCHEMA.strip().split(";"):
                    if statement.strip():
                        db.execute(statement)
                db.executemany("INSERT INTO meta VALUES (?, ?)", [
                    ("layout", LAYOUT_VERSION), ("tenant", self.tenant), ("topic", self.topic)])
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def reset(self, reason: str) -> None:
        """Remove the file (and its WAL) and start an empty view; `reason` is logged."""
        with self._lock:
            log.warning("view of tenant %s at %s is rebuilt from the topic: %s",
                        self.tenant, self.path, reason)
            self.rebuilt.append(reason)
            self._close()
            for suffix in ("", "-wal", "-shm", "-journal"):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(f"{self.path}{suffix}")
            self.path.parent.mkdir(parents=True, exist_ok=True)
            again = self._connect()
            if again is not None:
                raise ViewCorrupt(f"a fresh view at {self.path} is not usable: {again}")

    def still_there(self) -> bool:
        """Whether the open file is still the one at `path` (not deleted or replaced)."""
        try:
            return os.stat(self.path).st_ino == self._inode
        except FileNotFoundError:
            return False

    def _conn(self) -> sqlite3.Connection:
        if self._db is None:
            raise ViewCorrupt(f"the view at {self.path} is not open")
        return self._db

    def _close(self) -> None:
        db, self._db = self._db, None
        if db is not None:
            with contextlib.suppress(sqlite3.Error):
                db.close()

    def close(self) -> None:
        """Close the file (the view stays on disk for the next process)."""
        with self._lock:
            self._close()

    @contextlib.contextmanager
    def _guarded(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            try:
                yield self._conn()
            except sqlite3.DatabaseError as exc:
                if _corrupt(exc):
                    raise ViewCorrupt(f"the view at {self.path} is damaged: {exc}") from exc
                raise

    # -- writing ----------------------------------------------------------------------------

    def checkpoint(self) -> dict[int, int]:
        """Per events partition, the next offset the view has not applied."""
        with self._guarded() as db:
            return dict(db.execute("SELECT partition, next_offset FROM checkpoint").fetchall())

    def apply(self, rows: Sequence[Rows], skipped: Iterable[tuple[int, str]],
              next_offsets: Mapping[int, int]) -> None:
        """Apply one batch and move the checkpoint to `next_offsets`, in one transaction.

        `rows` in log order per partition (a run's emitted events must follow their cause);
        `skipped` are (position, reason) of undecodable records. Rows of a record the view
        already holds change nothing; a checkpoint never moves back.
        """
        with self._guarded() as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                self._apply(db, rows, skipped, next_offsets)
                db.execute("COMMIT")
            except BaseException:
                with contextlib.suppress(sqlite3.Error):
                    db.execute("ROLLBACK")
                raise

    @staticmethod
    def _apply(db: sqlite3.Connection, rows: Sequence[Rows],
               skipped: Iterable[tuple[int, str]], next_offsets: Mapping[int, int]) -> None:
        # An event that starts its chain is marked, and a partial index pages the chains
        # (no table of its own to insert into: a third of a typical log is such events).
        db.executemany(
            "INSERT OR IGNORE INTO events VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            [(r.event.pos, r.event.event_id, r.event.workspace, r.event.event_type,
              r.event.time_ms, r.event.raw, r.chain is not None,
              chain_key(r.event.correlation_id)) for r in rows])
        runs = [r for r in rows if r.run is not None]
        if runs:
            db.executemany("INSERT OR IGNORE INTO runs VALUES (?, ?, ?, ?, ?, ?)", [
                (r.run.workspace, r.run.run_id, r.run.rule, r.run.firing_id, r.run.time_ms,
                 r.run.pos) for r in runs if r.run is not None])
            # A run's root: its run_started is in its own closure (not among its emitted).
            db.executemany("INSERT OR IGNORE INTO caused VALUES (?, ?, ?, ?)", [
                (r.event.event_id, r.run.run_id, r.run.workspace, r.run.pos)
                for r in runs if r.run is not None])
        firings = [(r.firing.workspace, r.firing.firing_id, r.firing.rule, r.firing.time_ms,
                    r.firing.pos) for r in rows if r.firing is not None]
        if firings:
            db.executemany("INSERT OR IGNORE INTO firings VALUES (?, ?, ?, ?, ?)", firings)
        verdicts = any(r.verdict is not None for r in rows)
        feedback = [(r.feedback.pos, r.feedback.workspace, r.feedback.feedback_type,
                     r.feedback.participant, r.feedback.time_ms)
                    for r in rows if r.feedback is not None]
        if feedback:
            db.executemany("INSERT OR IGNORE INTO feedback VALUES (?, ?, ?, ?, ?)", feedback)
        if feedback or verdicts:
            # The latest verdict per (target, type, participant): a later one replaces it, an
            # older one (or the same one again) changes nothing.
            given = [f for r in rows for f in (r.feedback, r.verdict)
                     if f is not None and f.target_kind]
            db.executemany(
                "INSERT INTO verdicts VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (workspace, feedback_type, target_kind, target_id, participant) "
                "DO UPDATE SET evaluator = excluded.evaluator, person = excluded.person, "
                "value = excluded.value, time_ms = excluded.time_ms, pos = excluded.pos, "
                "shadow = excluded.shadow "
                "WHERE (excluded.time_ms, excluded.pos) > (verdicts.time_ms, verdicts.pos)",
                [(f.workspace, f.feedback_type, f.target_kind, f.target_id, f.participant,
                  f.evaluator, int(f.person), f.value_json, f.time_ms, f.pos, int(f.shadow))
                 for f in given])
            db.executemany("INSERT OR IGNORE INTO people_workspaces VALUES (?)",
                           [(w,) for w in {f.workspace for f in given if f.person}])
        alarms = [r.alarm for r in rows if r.alarm is not None]
        if alarms:
            # The newest alarm event per key is where its alarm stands.
            db.executemany(
                "INSERT INTO alarms VALUES (?, ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (workspace, evaluator, feedback_type, field) DO UPDATE SET "
                "raised = excluded.raised, episode = excluded.episode, "
                "time_ms = excluded.time_ms, pos = excluded.pos "
                "WHERE (excluded.time_ms, excluded.pos) > (alarms.time_ms, alarms.pos)",
                [(a.workspace, a.evaluator, a.feedback_type, a.field, int(a.raised),
                  a.episode, a.time_ms, a.pos) for a in alarms])
        # Membership: an event caused by an event of a run's closure joins that closure (and
        # every closure its cause is in: a run's emitted event may start another run). Run
        # one statement per event in log order, so a cause applied earlier in this batch is
        # found.
        db.executemany(
            "INSERT OR IGNORE INTO caused SELECT ?, run_id, workspace, ? FROM caused "
            "WHERE event_id = ? AND workspace = ?",
            [(r.event.event_id, r.event.pos, r.event.causation_id, r.event.workspace)
             for r in rows if r.event.causation_id])
        db.executemany("INSERT OR IGNORE INTO skipped VALUES (?, ?)", list(skipped))
        db.executemany(
            "INSERT INTO checkpoint VALUES (?, ?) ON CONFLICT (partition) DO UPDATE "
            "SET next_offset = max(next_offset, excluded.next_offset)",
            sorted(next_offsets.items()))

    # -- reading ----------------------------------------------------------------------------

    def runs(self, workspace: str, *, rule: str | None, limit: int | None,
             before: PageKey | None = None) -> list[tuple[str, PageKey]]:
        """Run ids (with their page keys) of the workspace, of `rule` when given, newest
        first by (time, partition, offset), strictly before `before` when given."""
        return self.item_ids("run", workspace, rule=rule, limit=limit, before=before)

    def item_ids(self, kind: str, workspace: str, *, rule: str | None = None,
                 limit: int | None = None, before: PageKey | None = None,
                 ) -> list[tuple[str, PageKey]]:
        """Ids (with their page keys) of the workspace's items of `kind`: `run` (run ids),
        `firing` (firing ids), both of `rule` when given, or `chain` (the correlation ids of
        chains an application event started; `rule` must be None); newest first by (time,
        partition, offset), strictly before `before` when given."""
        table, id_column, where, args = _items_where(kind, workspace, rule)
        if before is not None:
            where.append("(time_ms, pos) < (?, ?)")
            args += [before.time_ms, before.pos]
        sql = (f"SELECT {id_column}, time_ms, pos FROM {table} WHERE {' AND '.join(where)} "
               "ORDER BY time_ms DESC, pos DESC")
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        with self._guarded() as db:
            found = db.execute(sql, args).fetchall()
        return [(item, PageKey(time_ms, *seq_of(pos))) for item, time_ms, pos in found]

    def count_items(self, kind: str, workspace: str, *, rule: str | None = None,
                    between: tuple[PageKey, PageKey] | None = None) -> int:
        """How many ids `item_ids` gives (without `before` and `limit`): one COUNT; with
        `between=(newest, oldest)`, only those from `newest` down to `oldest`, both
        included (a range of the index: it costs the items in it)."""
        table, _id_column, where, args = _items_where(kind, workspace, rule)
        if between is not None:
            newest, oldest = between
            where.append("(time_ms, pos) <= (?, ?) AND (time_ms, pos) >= (?, ?)")
            args += [newest.time_ms, newest.pos, oldest.time_ms, oldest.pos]
        with self._guarded() as db:
            (count,) = db.execute(f"SELECT count(*) FROM {table} WHERE {' AND '.join(where)}",
                                  args).fetchone()
        return int(count)

    def judged(self, workspace: str, *, evaluator: str, feedback_type: str, on: str,
               below: tuple[str, float] | None = None,
               differs_on: Sequence[str] | None = None, limit: int | None = None,
               before: PageKey | None = None) -> list[tuple[str, PageKey]]:
        """Ids of the `on` targets whose latest verdict of type `feedback_type` by
        `evaluator` (a name: any version; `name@version`: that version) is below a
        threshold on a field (`below=(field, threshold)`), or differs from a person's latest
        verdict on one of the fields `differs_on` (a field one side left empty does not
        count); newest verdict first by (time, partition, offset), strictly before `before`.
        """
        if (below is None) == (differs_on is None):
            raise ValueError("pass below= or differs_on=, one of them")
        where = ["v.workspace = ?", "v.feedback_type = ?", "v.target_kind = ?"]
        args: list[object] = [workspace, feedback_type, on]
        if "@" in evaluator:
            where.append("v.participant = ?")
            args.append(f"evaluator:{evaluator}")
        else:
            # Every live version of the evaluator (the versions that give feedback); a
            # shadow's recorded verdicts count only when the version is named.
            where.append("v.evaluator = ? AND v.shadow = 0")
            args.append(evaluator)
        if below is not None:
            where.append("json_extract(v.value, ?) < ?")
            args += [_json_path(below[0]), below[1]]
        else:
            fields = list(differs_on or ())
            if not fields:
                return []
            differs = " OR ".join(
                "(json_extract(v.value, ?) IS NOT NULL AND json_extract(p.value, ?) IS NOT NULL "
                "AND json_extract(v.value, ?) IS NOT json_extract(p.value, ?))"
                for _ in fields)
            where.append(
                "EXISTS (SELECT 1 FROM verdicts p WHERE p.workspace = v.workspace AND "
                "p.feedback_type = v.feedback_type AND p.target_kind = v.target_kind AND "
                f"p.target_id = v.target_id AND p.person = 1 AND ({differs}))")
            for name in fields:
                args += [_json_path(name)] * 4
        return self._verdict_page(where, args, limit, before)

    def _verdict_page(self, where: list[str], args: list[object], limit: int | None,
                      before: PageKey | None) -> list[tuple[str, PageKey]]:
        """Target ids of the verdicts `v` the conditions choose, newest first by (time,
        partition, offset), strictly before `before`, at most `limit`: a page of a queue
        entered by verdicts."""
        if before is not None:
            where = [*where, "(v.time_ms, v.pos) < (?, ?)"]
            args = [*args, before.time_ms, before.pos]
        sql = (f"SELECT v.target_id, v.time_ms, v.pos FROM verdicts v WHERE "
               f"{' AND '.join(where)} ORDER BY v.time_ms DESC, v.pos DESC")
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        with self._guarded() as db:
            found = db.execute(sql, args).fetchall()
        return [(item, PageKey(time_ms, *seq_of(pos))) for item, time_ms, pos in found]

    def verdict_pairs(self, workspace: str, *, limit: int,
                      before: tuple[int, int] | None = None,
                      ) -> list[tuple[str | None, str, str | None, str, int, int, int]]:
        """The workspace's newest `limit` person verdicts (each participant's latest per type
        and target) strictly before `before` (a person verdict's `(time_ms, pos)`), newest
        first, each with every evaluator verdict on its target: rows of (evaluator
        participant, feedback type, the evaluator's value as JSON, the person's, the later
        of the two times in ms, the person verdict's time_ms and pos). A person verdict no
        evaluator gave one beside has one row, its evaluator and value None, so a page's
        last row is the next page's `before`.

        Bounded by `limit`, not by the log: it walks the person verdicts by time (an index)
        and finds each target's evaluator verdicts by the table's key."""
        where = ""
        args: list[object] = [workspace]
        if before is not None:
            where = "AND (time_ms, pos) < (?, ?) "
            args += [before[0], before[1]]
        sql = (
            "WITH people AS (SELECT feedback_type, target_kind, target_id, value, time_ms, pos "
            f"FROM verdicts WHERE workspace = ? AND person = 1 {where}"
            "ORDER BY time_ms DESC, pos DESC LIMIT ?) "
            "SELECT e.participant, p.feedback_type, e.value, p.value, "
            "max(coalesce(e.time_ms, p.time_ms), p.time_ms), p.time_ms, p.pos "
            "FROM people p LEFT JOIN verdicts e "
            "ON e.workspace = ? AND e.feedback_type = p.feedback_type "
            "AND e.target_kind = p.target_kind AND e.target_id = p.target_id "
            "AND e.person = 0 AND e.evaluator IS NOT NULL "
            "ORDER BY p.time_ms DESC, p.pos DESC, e.participant")
        with self._guarded() as db:
            found = db.execute(sql, (*args, int(limit), workspace)).fetchall()
        return [(e, str(t), judged, str(said), int(ms), int(pt), int(pp))
                for e, t, judged, said, ms, pt, pp in found]

    def alarms(self, workspace: str) -> list[tuple[str, str, str, bool, int]]:
        """Where each calibration alarm of the workspace stands, as its newest alarm event
        left it: (evaluator participant, feedback type, field, raised, episode); one row
        per key, so the read is as small as the keys."""
        with self._guarded() as db:
            found = db.execute(
                "SELECT evaluator, feedback_type, field, raised, episode FROM alarms "
                "WHERE workspace = ? ORDER BY evaluator, feedback_type, field",
                (workspace,)).fetchall()
        return [(str(e), str(t), str(f), bool(r), int(n)) for e, t, f, r, n in found]

    def verdict_workspaces(self) -> list[str]:
        """The workspaces where a person gave a verdict (a table of their own: one row
        each)."""
        with self._guarded() as db:
            found = db.execute("SELECT workspace FROM people_workspaces ORDER BY workspace"
                               ).fetchall()
        return [str(w) for (w,) in found]

    def newest_kind(self, workspace: str, participant: str, feedback_type: str,
                    kinds: Sequence[str]) -> str | None:
        """Of the target `kinds`, the one `participant` gave its newest verdict of
        `feedback_type` on (None: no verdict on any); one index look-up per kind."""
        newest: tuple[int, int, str] | None = None
        with self._guarded() as db:
            for kind in kinds:
                row = db.execute(
                    "SELECT time_ms, pos FROM verdicts WHERE workspace = ? AND "
                    "feedback_type = ? AND target_kind = ? AND participant = ? "
                    "ORDER BY time_ms DESC, pos DESC LIMIT 1",
                    (workspace, feedback_type, kind, participant)).fetchone()
                if row is not None and (newest is None or (row[0], row[1]) > newest[:2]):
                    newest = (int(row[0]), int(row[1]), kind)
        return None if newest is None else newest[2]

    def paired(self, workspace: str, *, a: str, b: str, feedback_type: str, on: str,
               limit: int | None = None, before: PageKey | None = None,
               ) -> list[tuple[str, PageKey]]:
        """Ids of the `on` targets both participants `a` and `b` (`evaluator:name@version`)
        gave a verdict of `feedback_type` on, newest by `a`'s verdict first (time, partition,
        offset), strictly before `before`: `a`'s verdicts walked by an index, `b`'s found by
        the table's key."""
        where = ["v.workspace = ?", "v.feedback_type = ?", "v.target_kind = ?",
                 "v.participant = ?"]
        args: list[object] = [workspace, feedback_type, on, a]
        where.append("EXISTS (SELECT 1 FROM verdicts w WHERE w.workspace = v.workspace AND "
                     "w.feedback_type = v.feedback_type AND w.target_kind = v.target_kind "
                     "AND w.target_id = v.target_id AND w.participant = ?)")
        args.append(b)
        return self._verdict_page(where, args, limit, before)

    def verdicts_of(self, workspace: str, kind: str, feedback_types: Sequence[str],
                    target_ids: Sequence[str],
                    ) -> list[tuple[str, str, str, bool, str, int, int]]:
        """Every participant's latest verdict of `feedback_types` on the `kind` targets
        named: (feedback type, target id, participant, person, value as JSON, time_ms, pos),
        by look-ups on the table's key in batches of 500 ids."""
        out: list[tuple[str, str, str, bool, str, int, int]] = []
        wanted = list(dict.fromkeys(target_ids))
        types = list(dict.fromkeys(feedback_types))
        if not types:
            return out
        type_marks = ", ".join("?" for _ in types)
        with self._guarded() as db:
            for at in range(0, len(wanted), 500):
                chunk = wanted[at:at + 500]
                marks = ", ".join("?" for _ in chunk)
                found = db.execute(
                    "SELECT feedback_type, target_id, participant, person, value, time_ms, "
                    f"pos FROM verdicts WHERE workspace = ? AND feedback_type IN ({type_marks}) "
                    f"AND target_kind = ? AND target_id IN ({marks})",
                    (workspace, *types, kind, *chunk)).fetchall()
                out += [(str(t), str(i), str(p), bool(h), str(v), int(ms), int(pos))
                        for t, i, p, h, v, ms, pos in found]
        return out

    def run_parts(self, workspace: str, run_id: str) -> RunParts | None:
        """A run's first `run_started`, its firing and its emitted events; None if the
        workspace has no such run."""
        with self._guarded() as db:
            run = db.execute(
                "SELECT r.firing_id, e.pos, e.time_ms, e.raw FROM runs r JOIN events e "
                "ON e.pos = r.pos WHERE r.workspace = ? AND r.run_id = ?",
                (workspace, run_id)).fetchone()
            if run is None:
                return None
            firing_id, pos, time_ms, raw = run
            fired = db.execute(
                "SELECT e.pos, e.time_ms, e.raw FROM firings f JOIN events e ON e.pos = f.pos "
                "WHERE f.workspace = ? AND f.firing_id = ?", (workspace, firing_id)).fetchone()
            emitted = db.execute(
                "SELECT e.pos, e.time_ms, e.raw FROM caused c JOIN events e ON e.pos = c.pos "
                "WHERE c.run_id = ? AND c.workspace = ? AND c.pos != ? ORDER BY c.pos",
                (run_id, workspace, pos)).fetchall()
        return RunParts(run_id, _raw(pos, time_ms, raw),
                        None if fired is None else _raw(*fired),
                        [_raw(*e) for e in emitted])

    def events_by_id(self, workspace: str, event_ids: Sequence[str]) -> dict[str, RawEvent]:
        """The workspace's events of these ids (the first copy of an id recorded twice)."""
        if not event_ids:
            return {}
        marks = ",".join("?" * len(event_ids))
        with self._guarded() as db:
            found = db.execute(
                f"SELECT event_id, min(pos), time_ms, raw FROM events WHERE event_id IN "
                f"({marks}) AND workspace = ? GROUP BY event_id",
                [*event_ids, workspace]).fetchall()
        return {event_id: _raw(pos, time_ms, raw) for event_id, pos, time_ms, raw in found}

    def chain(self, workspace: str, correlation_id: str) -> list[RawEvent]:
        """The workspace's chain `correlation_id` as the index answers it: [] unless the
        workspace has the event that starts it (the event whose id is the correlation id);
        else the events filed under its chain key in that event's partition from its offset
        on, in log order (a chain's events share their key, so they share a partition). A
        key two chains share returns both chains' events: the caller keeps those whose
        decoded correlation id is the one asked for."""
        with self._guarded() as db:
            [head] = db.execute("SELECT min(pos) FROM events WHERE event_id = ? AND "
                                "workspace = ?", (correlation_id, workspace)).fetchone()
            if head is None:
                return []
            partition, _offset = seq_of(head)
            found = db.execute(
                "SELECT pos, time_ms, raw FROM events WHERE chain_key = ? AND workspace = ? "
                "AND pos >= ? AND pos < ? ORDER BY pos",
                (chain_key(correlation_id), workspace, head,
                 position(partition + 1, 0))).fetchall()
        return [_raw(pos, time_ms, raw) for pos, time_ms, raw in found]

    def feedback(self, workspace: str, *, feedback_type: str | None, participant: str | None,
                 limit: int | None, after: PageKey | None = None) -> list[RawEvent]:
        """The workspace's feedback of the type and participant (each when given), oldest
        first by (time, partition, offset), strictly after `after` when given."""
        where, args = ["f.workspace = ?"], [workspace]
        if feedback_type is not None:
            where.append("f.feedback_type = ?")
            args.append(feedback_type)
        if participant is not None:
            where.append("f.participant = ?")
            args.append(participant)
        if after is not None:
            where.append("(f.time_ms, f.pos) > (?, ?)")
            args += [after.time_ms, after.pos]  # type: ignore[list-item]
        sql = (f"SELECT f.pos, f.time_ms, e.raw FROM feedback f JOIN events e ON e.pos = f.pos "
               f"WHERE {' AND '.join(where)} ORDER BY f.time_ms, f.pos")
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        with self._guarded() as db:
            return [_raw(*row) for row in db.execute(sql, args).fetchall()]

    def events(self, workspace: str) -> Iterator[RawEvent]:
        """Every event of the workspace, by partition and offset (the offline whole read)."""
        with self._guarded() as db:
            rows = db.execute("SELECT pos, time_ms, raw FROM events WHERE workspace = ? "
                              "ORDER BY pos", (workspace,)).fetchall()
        for row in rows:
            yield _raw(*row)

    def counts(self) -> dict[str, int]:
        """Rows per table (for progress lines and tests)."""
        with self._guarded() as db:
            return {name: db.execute(f"SELECT count(*) FROM {name}").fetchone()[0]
                    for name in ("events", "runs", "firings", "feedback", "verdicts",
                                 "caused", "skipped", "alarms")}

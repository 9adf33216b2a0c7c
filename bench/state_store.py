"""Which embedded store for rule state: write `--keys` keys in transactions of `--batch`
(upserts, as the decider's commits do), then open the file again and load every key (a
restore), for SQLite (stdlib sqlite3, WAL), DuckDB and RocksDB (rocksdict, when importable).

    python -m bench.state_store --keys 200000 --batch 1000
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from streams.adapters.state import open_store

__all__ = ["main"]


def _value(i: int) -> bytes:
    return (b'{"upto":%d,"rate":{"n":3,"per_us":600000000,"windows":{"2900000":2}}}' % i)


def sqlite_run(root: Path, keys: int, batch: int) -> tuple[float, float]:
    path = root / "s.sqlite"
    store = open_store(path)
    t0 = time.perf_counter()
    for lo in range(0, keys, batch):
        store.write([(f"rule|k{i}", _value(i)) for i in range(lo, min(keys, lo + batch))],
                    {"position": lo})
    write = time.perf_counter() - t0
    store.close()
    t0 = time.perf_counter()
    again = open_store(path)  # quick_check included
    n = sum(1 for _ in again.items())
    load = time.perf_counter() - t0
    assert n == keys and not again.rebuilt
    again.close()
    return write, load


def duckdb_run(root: Path, keys: int, batch: int) -> tuple[float, float]:
    import duckdb

    path = str(root / "d.duckdb")
    db = duckdb.connect(path)
    db.execute("CREATE TABLE kv (key VARCHAR PRIMARY KEY, value BLOB)")
    t0 = time.perf_counter()
    for lo in range(0, keys, batch):
        rows = [(f"rule|k{i}", _value(i)) for i in range(lo, min(keys, lo + batch))]
        db.execute("BEGIN")
        db.executemany("INSERT OR REPLACE INTO kv VALUES (?, ?)", rows)
        db.execute("COMMIT")
    write = time.perf_counter() - t0
    db.close()
    t0 = time.perf_counter()
    db = duckdb.connect(path)
    n = len(db.execute("SELECT key, value FROM kv").fetchall())
    load = time.perf_counter() - t0
    assert n == keys
    db.close()
    return write, load


def rocksdict_run(root: Path, keys: int, batch: int) -> tuple[float, float]:
    from rocksdict import Rdict, WriteBatch  # type: ignore[import-not-found]

    path = str(root / "r.rocks")
    db = Rdict(path)
    t0 = time.perf_counter()
    for lo in range(0, keys, batch):
        wb = WriteBatch(raw_mode=False)
        for i in range(lo, min(keys, lo + batch)):
            wb.put(f"rule|k{i}", _value(i))
        db.write(wb)
    write = time.perf_counter() - t0
    db.close()
    t0 = time.perf_counter()
    db = Rdict(path)
    n = sum(1 for _ in db.items())
    load = time.perf_counter() - t0
    assert n == keys
    db.close()
    return write, load


def main() -> None:
    """Print, per store, the time to write and to reopen and load every key."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--keys", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=1000)
    args = parser.parse_args()
    runs: dict[str, Callable[[Path, int, int], tuple[float, float]]] = {
        "sqlite": sqlite_run, "duckdb": duckdb_run, "rocksdict": rocksdict_run}
    for name, run in runs.items():
        # DuckDB's row-by-row upserts into a keyed table run at ~100 keys/s here: a
        # slice of the keys tells as much.
        keys = min(args.keys, 5000) if name == "duckdb" else args.keys
        root = Path(tempfile.mkdtemp(prefix=f"state-{name}-"))
        try:
            write, load = run(root, keys, args.batch)
        except ImportError as exc:
            print(f"{name}: not installed ({exc})")
            continue
        finally:
            size = sum(f.stat().st_size for f in root.rglob("*") if f.is_file())
            shutil.rmtree(root, ignore_errors=True)
        print(f"{name}: {keys} keys in batches of {args.batch}: write "
              f"{keys / write:,.0f} keys/s ({write:.2f} s), reopen+load {load:.2f} s, "
              f"{size / 1e6:.1f} MB")


if __name__ == "__main__":
    main()

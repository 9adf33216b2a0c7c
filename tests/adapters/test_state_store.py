"""The local state store: writes in one transaction, reopened as it was; a missing,
truncated or garbled file is rebuilt empty (never trusted)."""

from __future__ import annotations

from pathlib import Path

from streams.adapters.state import open_store


def _filled(path: Path, n: int = 2000) -> None:
    store = open_store(path)
    store.write([(f"k{i}", b"v" * 40 + str(i).encode()) for i in range(n)],
                {"checkpoint": 17, "position": 42})
    store.write([("k0", None), ("k1", b"new")])
    store.close()


def test_writes_survive_a_reopen(tmp_path: Path) -> None:
    path = tmp_path / "rules" / "acme" / "0" / "state.sqlite"
    store = open_store(path)
    assert store.rebuilt and list(store.items()) == [] and store.meta("checkpoint") is None
    store.close()
    _filled(path)
    again = open_store(path)
    assert not again.rebuilt
    items = dict(again.items())
    assert len(items) == 1999 and "k0" not in items and items["k1"] == b"new"
    assert again.get("k1") == b"new" and again.get("k0") is None
    assert again.meta("checkpoint") == 17 and again.meta("position") == 42
    again.close()


def test_a_deleted_store_starts_empty(tmp_path: Path) -> None:
    path = tmp_path / "state.sqlite"
    _filled(path)
    for file in tmp_path.iterdir():
        file.unlink()
    store = open_store(path)
    assert store.rebuilt and list(store.items()) == []


def test_a_truncated_store_is_rebuilt(tmp_path: Path) -> None:
    path = tmp_path / "state.sqlite"
    _filled(path, 20000)
    size = path.stat().st_size
    with path.open("r+b") as f:
        f.truncate(size // 2)
    store = open_store(path)
    assert store.rebuilt and list(store.items()) == [] and store.meta("position") is None


def test_a_garbled_store_is_rebuilt(tmp_path: Path) -> None:
    path = tmp_path / "state.sqlite"
    _filled(path, 20000)
    with path.open("r+b") as f:
        f.seek(0)
        f.write(b"\x00garbage" * 64)
    store = open_store(path)
    assert store.rebuilt and list(store.items()) == []
    store.write([("a", b"1")], {"position": 1})
    store.close()
    assert dict(open_store(path).items()) == {"a": b"1"}


def test_pages_overwritten_in_the_middle_fail_the_check(tmp_path: Path) -> None:
    path = tmp_path / "state.sqlite"
    _filled(path, 20000)
    size = path.stat().st_size
    with path.open("r+b") as f:
        f.seek(size // 2)
        f.write(b"\xff" * 8192)
    store = open_store(path)
    assert store.rebuilt

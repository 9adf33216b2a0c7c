"""The index's local store: positions with their entries, a run's first place kept, and a
corrupt or truncated file rebuilt rather than trusted."""

from pathlib import Path

from streams.adapters.kafka.index_store import IndexStore


def test_entries_and_positions_survive_a_new_process(tmp_path: Path) -> None:
    path = tmp_path / "state" / "index" / "fs.acme.index.sqlite"
    store = IndexStore(path)
    store.apply(3, [(b"run:r1", b"first"), (b"chain:c1", b"c"), (b"event:e1", b"x")], 10,
                keep_first=(b"run:",))
    store.apply(3, [(b"run:r1", b"again"), (b"event:e1", None), (b"cursor:0", b"7")], 12,
                keep_first=(b"run:",))
    store.close()
    again = IndexStore(path)
    assert again.position(3) == 12 and again.position(4) == 0
    assert again.get(b"run:r1") == b"first"  # a run recorded again keeps its first place
    assert again.get(b"event:e1") is None  # a tombstone deletes
    assert again.with_prefix(b"cursor:") == {b"cursor:0": b"7"}
    again.drop_partition(3)
    assert again.position(3) == 0 and again.get(b"chain:c1") is None


def test_a_corrupt_store_is_rebuilt_not_trusted(tmp_path: Path) -> None:
    path = tmp_path / "index.sqlite"
    store = IndexStore(path)
    store.apply(1, [(b"chain:c1", b"c")], 5)
    store.close()
    path.write_bytes(b"not a database" * 100)
    rebuilt = IndexStore(path)
    assert rebuilt.path == path  # deleted and made again, on disk
    assert rebuilt.position(1) == 0 and rebuilt.get(b"chain:c1") is None
    rebuilt.apply(1, [(b"chain:c1", b"c")], 5)
    assert rebuilt.get(b"chain:c1") == b"c"


def test_an_unwritable_directory_keeps_the_store_in_memory(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("a file where the directory would be")
    store = IndexStore(blocker / "index.sqlite")
    assert store.path is None
    store.apply(0, [(b"cursor:1", b"9")], 1)
    assert store.get(b"cursor:1") == b"9"

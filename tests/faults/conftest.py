"""Fault and fuzz tests: the worker and give_feedback under failures and hostile input.

Every test here is an integration test on a real broker and registry. Tests that do not stop
servers use the session's shared stack (tests/conftest.py). Tests that stop or restart the
broker or the registry use `own_stack`: a stack of this session alone, started by
deploy/stack.sh on free loopback ports with its own data dir (jars from STACK_CACHE, default
the repository's .stack/cache), and stopped by the script (which signals its servers by pid)
at the end of the session, even when a test fails; a server still alive after that is killed
by the pid in its pid file, and only if that process is this stack's.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from typing import Any

import pytest

from tests.conftest import WorkerProcess
from tests.stacks import OwnStack, own_stack_in


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "/faults/" in str(item.path):
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="package")
def own_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OwnStack]:
    with own_stack_in(tmp_path_factory.mktemp("faults-stack") / "data", start=True) as stack:
        yield stack


def assert_alive(*workers: WorkerProcess) -> None:
    """No worker exited (a crash, or exit 70 on an outage it gave up on)."""
    for worker in workers:
        assert worker.proc is not None
        code = worker.proc.poll()
        assert code is None, f"worker exited with {code}:\n{worker.log()[-4000:]}"


def check_scores(records: Iterable[tuple[Any, dict[str, Any]]],
                 expected: dict[str, set[str]]) -> int:
    """Every feedback event of `expected` (id -> its score names) has exactly those scores,
    one id per (feedback, name), and nothing else was scored; returns the repeats (records
    written again with the same id, at-least-once)."""
    records = list(records)
    names: dict[str, set[str]] = defaultdict(set)
    ids_by: dict[tuple[str, str], set[str]] = defaultdict(set)
    for _msg, record in records:
        fid = record["source"]["feedback_event_id"]
        names[fid].add(record["name"])
        ids_by[(fid, record["name"])].add(record["id"])
    unexpected = sorted(set(names) - set(expected))
    assert unexpected == [], f"{len(unexpected)} scored feedback events were never given"
    wrong = {fid: (sorted(names.get(fid, ())), sorted(want))
             for fid, want in expected.items() if names.get(fid, set()) != want}
    assert wrong == {}, f"{len(wrong)} feedback events lack or have extra scores: " \
                        f"{list(wrong.items())[:5]}"
    assert all(len(v) == 1 for v in ids_by.values()), "a (feedback, score) with two ids"
    per_id = Counter(r["id"] for _m, r in records)
    assert len(per_id) == sum(len(v) for v in expected.values())
    return sum(c - 1 for c in per_id.values())

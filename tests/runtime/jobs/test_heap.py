"""The collector paused for a job's block, and restored as it was."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from streams.runtime.jobs.heap import collector_paused


@pytest.fixture(autouse=True)
def _collector_restored() -> Iterator[None]:
    was = gc.isenabled()
    yield
    if was:
        gc.enable()
    else:
        gc.disable()


def test_the_collector_is_off_inside_and_on_again_after() -> None:
    gc.enable()
    with collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_an_error_in_the_block_still_turns_it_on_again() -> None:
    gc.enable()
    with pytest.raises(RuntimeError), collector_paused():
        raise RuntimeError("the job failed")
    assert gc.isenabled()


def test_a_nested_pause_leaves_the_outer_one_in_force() -> None:
    gc.enable()
    with collector_paused():
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled(), "the inner pause ended the outer one"
    assert gc.isenabled()


def test_a_process_that_runs_without_the_collector_keeps_it_off() -> None:
    gc.disable()
    with collector_paused():
        assert not gc.isenabled()
    assert not gc.isenabled()


def test_cycles_made_during_the_pause_are_collected_afterwards() -> None:
    gc.enable()

    class Node:
        other: Node | None = None

    with collector_paused():
        a, b = Node(), Node()
        a.other, b.other = b, a
        alive = weakref.ref(a)
        del a, b
        # Many allocations: with the collector on, one of them would set off a collection.
        _ = [[n] for n in range(100_000)]
        assert alive() is not None, "a collection ran during the pause"
    gc.collect()
    assert alive() is None, "the cycle outlived the pause"

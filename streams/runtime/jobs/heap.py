"""Python's cyclic garbage collector paused while a job fills memory with a log's records.

    with collector_paused():
        read = read_workspace_log(runtime, tenant, workspace)
        report = build_report(read.envelopes, ...)

A job that keeps a whole log's envelopes (the report) makes millions of objects that live
until it ends. A full collection walks every live object, and one comes each time the
objects that survived since the last reach a quarter of those before, so with the collector
on about half of such a job's CPU went to walking envelopes that were never garbage:
`streams report` took about twice as long, at 120,000 envelopes as at a million
(docs/measures.md, "Speed", has the figures and their command). The envelopes hold no
reference cycles, so reference counting frees them whatever the collector does.

Only a command's own process pauses it (`streams report`), never a library call: the switch
is the whole process's, and a handle must not change its user's heap. Cycles made meanwhile
(an exception's traceback) are collected once the collector runs again.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["collector_paused"]


@contextmanager
def collector_paused() -> Iterator[None]:
    """Disable the cyclic garbage collector for the block, then restore it as it was (left
    disabled if it was disabled before: nested pauses, or a process that runs without it)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()

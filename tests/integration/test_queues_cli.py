"""Annotation queues as data on the real broker: `streams queues install/list/archive`, each
refusal one line naming the JSON path or what to do, and its exit code."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from streams.core.queues import QueueEntry
from streams.runtime.jobs.queues import QueueBook
from streams.runtime.root import Runtime
from streams.settings import Settings
from tests.conftest import REPO

TYPES = "streams.examples.ops"


def a_queue(**changes: Any) -> dict[str, Any]:
    return {"name": "triage-review", "enters": {"runs_of": "ops:wrong-triage"},
            "feedback_types": ["triage_quality"], "reviewers": 2, "blind": True, **changes}


def cli(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "streams", "queues", *args],
                          env=settings.child_env(STREAMS_FEEDBACK_MODULES=TYPES),
                          capture_output=True, text=True, cwd=str(REPO), timeout=120)


def install(settings: Settings, tmp_path: Path, tenant: str, data: Any,
            workspace: str = "prod") -> subprocess.CompletedProcess[str]:
    path = tmp_path / f"queue{time.monotonic_ns()}.json"
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return cli(settings, "install", str(path), "--tenant", tenant, "--workspace", workspace,
               "--by", "user:ada")


def ok(done: subprocess.CompletedProcess[str]) -> Any:
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_queue_is_installed_listed_repeated_refused_and_archived(
    settings: Settings, tenant_factory: Callable[..., str], tmp_path: Path,
) -> None:
    tenant = tenant_factory()
    assert ok(cli(settings, "list", "--tenant", tenant, "--workspace", "prod")) == []

    first = ok(install(settings, tmp_path, tenant, a_queue()))
    assert (first["queue"], first["state"], first["repeat"], first["installed_by"]) == \
        ("triage-review", "installed", False, "user:ada")
    # Stored in its canonical form: the defaults spelled out.
    assert first["definition"]["lease_seconds"] == 900.0
    assert first["definition"]["sample"] == 1.0
    # The same definition, defaults spelled out this time: a repeat, nothing written.
    again = ok(install(settings, tmp_path, tenant, first["definition"]))
    assert again["repeat"] and again["installed_at_ms"] == first["installed_at_ms"]
    # Another definition under a live name is refused, saying what to do.
    clash = install(settings, tmp_path, tenant, a_queue(reviewers=3))
    assert clash.returncode == 2
    assert "live in workspace 'prod' with another definition" in clash.stderr
    assert "streams queues archive triage-review" in clash.stderr
    # The same name in another workspace is another queue.
    ok(install(settings, tmp_path, tenant, a_queue(reviewers=3), workspace="dev"))

    listed = ok(cli(settings, "list", "--tenant", tenant, "--workspace", "prod"))
    assert [(q["queue"], q["definition"]["reviewers"]) for q in listed] == \
        [("triage-review", 2)]

    archived = ok(cli(settings, "archive", "triage-review", "--tenant", tenant,
                      "--workspace", "prod", "--by", "user:bo"))
    assert (archived["state"], archived["archived_by"]) == ("archived", "user:bo")
    assert ok(cli(settings, "list", "--tenant", tenant, "--workspace", "prod")) == []
    assert [q["state"] for q in ok(cli(settings, "list", "--tenant", tenant, "--workspace",
                                       "prod", "--all"))] == ["archived"]
    # Archived twice: nothing to archive, exit 5 naming the live queues.
    twice = cli(settings, "archive", "triage-review", "--tenant", tenant, "--workspace", "prod")
    assert twice.returncode == 5 and "no live queue 'triage-review'" in twice.stderr
    # Installed again after the archive: a new install with the new definition.
    fresh = ok(install(settings, tmp_path, tenant, a_queue(reviewers=3)))
    assert not fresh["repeat"] and fresh["definition"]["reviewers"] == 3

    # What the topic holds, read as a worker or server would.
    entries = QueueBook(Runtime(settings)).entries(tenant)
    assert sorted((e.workspace, e.name, e.state) for e in entries.values()) == \
        [("dev", "triage-review", "installed"), ("prod", "triage-review", "installed")]
    assert all(isinstance(e, QueueEntry) for e in entries.values())


def test_bad_definitions_are_refused_with_their_path_and_nothing_is_written(
    settings: Settings, tenant_factory: Callable[..., str], tmp_path: Path,
) -> None:
    tenant = tenant_factory()
    cases = [
        (a_queue(feedback_types=["resolution"]), "at $.feedback_types[0]",
         "resolution feedback cannot be given on a run"),
        (a_queue(feedback_types=["nope"]), "at $.feedback_types[0]",
         "no feedback type 'nope'"),
        (a_queue(reviewers=0), "at $.reviewers", "less than the minimum"),
        ('{"name": "q",\n', "queue JSON is not valid JSON", "line 2 column 1"),
    ]
    for data, where, says in cases:
        refused = install(settings, tmp_path, tenant, data)
        assert refused.returncode == 2, refused.stderr
        assert where in refused.stderr and says in refused.stderr
        assert refused.stdout == ""
    unknown = cli(settings, "list", "--tenant", tenant + "x", "--workspace", "prod")
    assert unknown.returncode == 5
    assert ok(cli(settings, "list", "--tenant", tenant, "--workspace", "prod", "--all")) == []

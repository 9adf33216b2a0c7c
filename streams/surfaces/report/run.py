"""Making a report from the broker: read the workspace's log, build, write both files.

    files = make_report(runtime, "acme", "prod", out=Path("report"), progress=...)
    files.json_path, files.html_path
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from streams.core.queues import queue_from_dict
from streams.core.rules import InvalidRule, Rule
from streams.core.rules.serialized import rule_from_dict
from streams.runtime.client.workspace import StreamsClient
from streams.runtime.jobs.log_read import Progress, read_workspace_log
from streams.runtime.jobs.queues import QueueBook, queue_items
from streams.runtime.jobs.rules import Rulebook
from streams.runtime.root import Runtime
from streams.surfaces.report.html import render_html
from streams.surfaces.report.model import (
    DEFAULT_QUALITY,
    DEFAULT_RESOLVES,
    ReportError,
    build_report,
    check_window,
    in_window,
    parse_period,
    parse_quality,
)

__all__ = ["ReportFiles", "make_report", "write_report"]


@dataclass(frozen=True)
class ReportFiles:
    """Where a report was written, and the report itself."""

    json_path: Path
    html_path: Path
    report: dict[str, Any]


def write_report(report: dict[str, Any], out: Path) -> ReportFiles:
    """Write `report.json` and `report.html` into `out` (created when missing)."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        json_path = out / "report.json"
        html_path = out / "report.html"
        json_path.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
        html_path.write_text(render_html(report), encoding="utf-8")
    except OSError as exc:
        raise ReportError(f"cannot write the report into {out}: {exc}; choose another "
                          "--out") from exc
    return ReportFiles(json_path, html_path, report)


async def _queues(runtime: Runtime, tenant: str, workspace: str) -> dict[str, list[str]]:
    """The workspace's live annotation queues and their items (from the tenant's view)."""
    book = QueueBook(runtime)
    live = await asyncio.to_thread(book.queues, tenant, workspace)
    if not live:
        return {}
    ws = StreamsClient(runtime).workspace(tenant, workspace)
    return {entry.name: await queue_items(ws, queue_from_dict(entry.definition,
                                                               types=runtime.types))
            for entry in live}


def installed_rules(runtime: Runtime, tenant: str, besides: Sequence[Rule] = ()) -> list[Rule]:
    """The rules installed for the tenant (live or archived since: the window may hold
    their events) that this process can build, but those named in `besides`; a definition
    naming an app event type this process has not declared is left out."""
    names = {rule.name for rule in besides}
    out: list[Rule] = []
    for name, entry in sorted(Rulebook(runtime).entries(tenant).items()):
        if name in names:
            continue
        try:
            out.append(rule_from_dict(entry.definition))
        except InvalidRule:
            continue
    return out


def make_report(
    runtime: Runtime, tenant: str, workspace: str, *, out: Path,
    since: datetime | None = None, until: datetime | None = None,
    resolves: str = DEFAULT_RESOLVES, quality_of: str = DEFAULT_QUALITY,
    progress: Progress | None = None, per: str = "day", rules: Sequence[Rule] = (),
) -> ReportFiles:
    """Read the workspace's log from the tenant's events topic and write its report.

    Errors before any reading: a window whose start is not before its end, a bad
    `quality_of` or `per` (`day` or `week`: the trends' period). After: NotFound for an
    unknown tenant; ReportError for an empty log, a workspace the log does not name, or a
    window holding none of its events.
    """
    check_window(since, until)
    parse_quality(quality_of)
    parse_period(per)
    read = read_workspace_log(runtime, tenant, workspace, progress=progress)
    if read.records == 0:
        raise ReportError(f"the log of tenant {tenant!r} ({read.topic}) is empty: nothing to "
                          "report yet")
    if not read.envelopes:
        known = ", ".join(sorted(read.workspaces)) or "none that could be decoded"
        raise ReportError(f"tenant {tenant!r} has no workspace {workspace!r}; its log names: "
                          f"{known}")
    chosen = in_window(read.envelopes, since, until)
    if not chosen:
        first = min(e.time for e in read.envelopes).isoformat()
        last = max(e.time for e in read.envelopes).isoformat()
        raise ReportError(f"workspace {workspace!r} has no events in the window; its events "
                          f"run from {first} to {last}: widen --since/--until")
    # Every envelope goes in: the window is applied inside, and the proposal measures need
    # what came before it (a proposal older than its resolution, an install's draft).
    report = build_report(read.envelopes, tenant=tenant, workspace=workspace, since=since,
                          until=until, resolves=resolves, quality_of=quality_of,
                          types=runtime.types, per=per,
                          prices=runtime.settings.llm_price_table(),
                          queues=asyncio.run(_queues(runtime, tenant, workspace)),
                          rules=[*rules, *installed_rules(runtime, tenant, rules)])
    return write_report(report, out)

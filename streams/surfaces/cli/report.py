"""`streams report`: measure a workspace from its tenant's log into report.json and a
self-contained report.html."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from streams.core.errors import StreamsError
from streams.surfaces.cli.base import (
    TypesOption,
    console,
    counted,
    fail,
    load_rules,
    load_types,
    settings,
)

__all__ = ["report"]


def report(
    tenant: Annotated[str, typer.Option(help="The tenant whose log is read.")],
    workspace: Annotated[str, typer.Option(help="The workspace reported on.")],
    out: Annotated[Path, typer.Option(help="Folder for report.json and report.html.")],
    since: Annotated[str | None, typer.Option(
        help="Only events at or after this ISO 8601 date/time (UTC unless it has an "
        "offset).")] = None,
    until: Annotated[str | None, typer.Option(
        help="Only events before this ISO 8601 date/time.")] = None,
    resolves: Annotated[str, typer.Option(
        help="Event type that resolves a chain, for the time-to-resolution distribution "
        "(e.g. oncall:incident.resolved).")] = "run_succeeded",
    quality_of: Annotated[str, typer.Option(
        "--quality", help="FEEDBACK_TYPE.FIELD whose mean is the quality per agent.")]
    = "workflow_review.quality_score",
    per: Annotated[str, typer.Option(
        help="The trends' period: day (UTC) or week (ISO).")] = "day",
    types: TypesOption = None,
    rules: Annotated[list[str] | None, typer.Option(
        "--rules", help="Rules modules (the workers' --rules) whose rules the `why` part "
        "counts, besides the tenant's installed rules; repeatable. Default: "
        "$STREAMS_RULE_MODULES.")] = None,
) -> None:
    """Measure a workspace from its tenant's log: rule outcomes, time to resolution, judge
    agreement, how people and each evaluator version answered, trends per day or week,
    quality, and what each rule did with the events it watches (why); writes
    OUT/report.json and OUT/report.html (self-contained)."""
    from streams.runtime.jobs.heap import collector_paused
    from streams.runtime.root import Runtime
    from streams.surfaces.report.model import (
        check_window,
        parse_period,
        parse_quality,
        parse_time,
    )
    from streams.surfaces.report.run import make_report

    load_types(types)
    module_rules, _actions, _deps = load_rules(rules)
    config = settings()
    try:
        start = parse_time(since, "--since") if since else None
        end = parse_time(until, "--until") if until else None
        check_window(start, end)
        parse_quality(quality_of)
        parse_period(per)
    except StreamsError as exc:
        raise fail(exc) from exc
    runtime = Runtime(config)
    try:
        # Shown once the end offsets are known, so an unknown tenant prints no bar. The
        # collector is paused: it would walk every kept envelope again and again
        # (streams.runtime.jobs.heap).
        with counted(f"reading {tenant}'s log") as progress, collector_paused():
            files = make_report(runtime, tenant, workspace, out=out, since=start, until=end,
                                resolves=resolves, quality_of=quality_of, progress=progress,
                                per=per, rules=module_rules)
    except StreamsError as exc:
        raise fail(exc) from exc
    finally:
        runtime.close()
    summary = files.report
    console.print(f"{summary['events']} events of {tenant}/{workspace}: "
                  f"{len(summary['rule_outcomes'])} rules, "
                  f"{summary['time_to_resolution']['chains']} chains resolved, "
                  f"{len(summary['judge_agreement'])} judge agreement rows, "
                  f"{len(summary['quality']['agents'])} agents with quality")
    if summary["unregistered_feedback_types"]:
        names = ", ".join(summary["unregistered_feedback_types"])
        console.print(f"[yellow]warning:[/] feedback of types this command does not know "
                      f"({names}) is left out of judge agreement's categorical fields: pass "
                      f"the module that defines them with --types (or STREAMS_FEEDBACK_MODULES)")
    print(json.dumps({"json": str(files.json_path), "html": str(files.html_path)}))



"""`streams deadletters ...`: see a tenant's dead letters (`list`) and re-drive the chosen
ones after their cause was fixed (`redrive`), idempotently (streams.core.deadletters).

Both commands take the same filters (all must hold). Output: `list` prints a table, or JSON
lines with `--json`; `redrive` prints one JSON line per letter it re-drove (or, with
`--dry-run`, would re-drive), could not re-drive, or had re-driven before, then a summary
line. Progress and messages go to stderr.

Exit codes (streams.surfaces.cli.base.ExitCode, tabled in docs/cli.md): 0 done; 2 a refusal
(a bad filter); 3 nothing matches the filters; 4 `redrive` left some selected letters not
re-driven (each listed with why); 5 an unknown tenant; 6 a module that cannot be imported;
10 the broker cannot be reached.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from streams.core.deadletters import DeadLetter, Selection, parse_at, parse_source
from streams.core.errors import StreamsError, ValidationFailed
from streams.surfaces.cli.base import ExitCode, console, fail, load_types, settings

if TYPE_CHECKING:
    from streams.runtime.root import Runtime

__all__ = ["NOTHING_MATCHES", "NOT_ALL_REDRIVEN", "deadletters_app"]

NOTHING_MATCHES = ExitCode.NOTHING_MATCHES
NOT_ALL_REDRIVEN = ExitCode.NOT_ALL_REDRIVEN

deadletters_app = typer.Typer(
    no_args_is_help=True,
    help="Dead letters: list a tenant's, re-drive the chosen ones after a fix.")
_T = TypeVar("_T")

TenantOption = Annotated[str, typer.Option("--tenant", help="The tenant.")]
ReasonOption = Annotated[str | None, typer.Option(
    "--reason", help="Letters whose reason contains this text (case-insensitive).")]
StageOption = Annotated[str | None, typer.Option(
    "--stage", help="Who gave up: mirror, sink:<cursor>, or sink: for every sink.")]
KindOption = Annotated[str | None, typer.Option(
    "--kind", help="undecodable, invalid, rejected, internal or unknown.")]
SourceOption = Annotated[str | None, typer.Option(
    "--source", help="Letters of records from this TOPIC or TOPIC:PARTITION.")]
FromOption = Annotated[int | None, typer.Option(
    "--from-offset", help="Source offsets from this one (inclusive).")]
ToOption = Annotated[int | None, typer.Option(
    "--to-offset", help="Source offsets up to this one (inclusive).")]
SinceOption = Annotated[str | None, typer.Option(
    "--since", help="Letters written at or after this ISO 8601 time (UTC if no zone).")]
UntilOption = Annotated[str | None, typer.Option(
    "--until", help="Letters written before this ISO 8601 time (UTC if no zone).")]
AtOption = Annotated[list[str] | None, typer.Option(
    "--at", help="A letter's PARTITION:OFFSET in the dead-letter topic (the `at` column); "
    "repeatable.")]


def _time(name: str, text: str | None) -> datetime | None:
    if text is None:
        return None
    try:
        return datetime.fromisoformat(text)
    except ValueError as exc:
        raise ValidationFailed(f"{name} {text!r} is not an ISO 8601 time, e.g. "
                               "2026-11-30T09:00 or 2026-11-30T09:00:00+01:00") from exc


def _selection(reason: str | None, stage: str | None, kind: str | None, source: str | None,
               from_offset: int | None, to_offset: int | None, since: str | None,
               until: str | None, at: list[str] | None) -> Selection:
    topic, partition = parse_source(source) if source is not None else (None, None)
    return Selection(reason=reason, stage=stage, kind=kind, source_topic=topic,
                     source_partition=partition, from_offset=from_offset,
                     to_offset=to_offset, since=_time("--since", since),
                     until=_time("--until", until),
                     at=frozenset(parse_at(a) for a in at or ()))


def _nothing(topic: str, total: int) -> str:
    if total == 0:
        return f"{topic} has no dead letters"
    return f"no dead letter of {topic} matches the filters ({total} in all; `streams " \
        "deadletters list --tenant T` shows them)"


def _run(work: Callable[[Runtime], _T]) -> _T:
    """Run `work(runtime)` on a Runtime from the environment; project errors become a
    message and an exit code."""
    # Lazy: the composition root loads the Kafka clients, which `--help` does not need.
    from streams.runtime.root import Runtime

    runtime = Runtime(settings())
    try:
        return work(runtime)
    except StreamsError as exc:
        raise fail(exc) from exc
    finally:
        runtime.close()


def _progress(what: str) -> Callable[[int, int], None]:
    """A progress report on stderr, every 10% of long work (quiet below 1,000 items)."""
    shown = {"last": -1}

    def report(done: int, total: int) -> None:
        if total < 1000:
            return
        tenth = done * 10 // total
        if tenth != shown["last"]:
            shown["last"] = tenth
            console.print(f"{what}: {done:,}/{total:,}")
    return report


def _load(runtime: Runtime, tenant: str, selection: Selection,
          ) -> tuple[str, list[DeadLetter], set[str]]:
    """The tenant's dead-letter topic, its letters and the keys re-driven before."""
    from streams.runtime.jobs.deadletters import read_letters, read_redriven, require_tenant

    topic = require_tenant(runtime, tenant)
    letters, unreadable = read_letters(runtime, topic, _progress(f"reading {topic}"))
    for note in unreadable:
        console.print(f"[yellow]skipped, not a dead letter:[/yellow] {escape(note)}",
                      soft_wrap=True)
    return topic, letters, set(read_redriven(runtime, topic))


@deadletters_app.command("list")
def list_(
    tenant: TenantOption,
    reason: ReasonOption = None, stage: StageOption = None, kind: KindOption = None,
    source: SourceOption = None, from_offset: FromOption = None, to_offset: ToOption = None,
    since: SinceOption = None, until: UntilOption = None, at: AtOption = None,
    limit: Annotated[int | None, typer.Option(
        "--limit", min=1, help="At most this many, in partition and offset order.")] = None,
    as_json: Annotated[bool, typer.Option(
        "--json", help="JSON lines instead of a table.")] = False,
) -> None:
    """A tenant's dead letters: where each is (`at`), where its record was, who gave up,
    why, and whether it was re-driven. Reads the topic; changes nothing."""
    def work(runtime: Runtime) -> tuple[str, list[DeadLetter], set[str], int]:
        selection = _selection(reason, stage, kind, source, from_offset, to_offset, since,
                               until, at)
        topic, letters, redriven = _load(runtime, tenant, selection)
        return topic, selection.select(letters), redriven, len(letters)

    topic, chosen, redriven, total = _run(work)
    if not chosen:
        raise fail(_nothing(topic, total), NOTHING_MATCHES)
    shown = chosen[:limit] if limit is not None else chosen
    if as_json:
        for letter in shown:
            print(json.dumps({**letter.summary(), "redriven": letter.at in redriven}))
    else:
        table = Table(title=f"{topic}: {len(chosen)} of {total}")
        for column in ("at", "time", "stage", "kind", "source", "reason", "redriven"):
            table.add_column(column, overflow="fold")
        for letter in shown:
            table.add_row(letter.at, letter.time.strftime("%Y-%m-%d %H:%M:%S"), letter.stage,
                          letter.kind, letter.source, escape(letter.reason),
                          "yes" if letter.at in redriven else "")
        Console().print(table)
    if len(shown) < len(chosen):
        console.print(f"{len(chosen) - len(shown)} more; raise --limit to see them")


@deadletters_app.command("redrive")
def redrive(
    tenant: TenantOption,
    reason: ReasonOption = None, stage: StageOption = None, kind: KindOption = None,
    source: SourceOption = None, from_offset: FromOption = None, to_offset: ToOption = None,
    since: SinceOption = None, until: UntilOption = None, at: AtOption = None,
    types: Annotated[list[str] | None, typer.Option(
        "--types", help="Module that defines feedback types (the fixed ones); repeatable. "
        "Default: $STREAMS_FEEDBACK_MODULES.")] = None,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Print what would be re-driven; write nothing.")] = False,
) -> None:
    """Re-drive the chosen dead letters after fixing their cause: a mirror letter is scored
    again with the feedback types loaded now (scores to the scores topic, nothing to the
    events topic); a sink letter's score is re-published to its scores topic. Each letter
    is re-driven at most once: a letter re-driven before is skipped."""
    from streams.core.deadletters import redrive_plan
    from streams.runtime.jobs.deadletters import RedriveResult, execute

    load_types(types)

    def work(runtime: Runtime) -> tuple[str, Any, RedriveResult, int]:
        selection = _selection(reason, stage, kind, source, from_offset, to_offset, since,
                               until, at)
        topic, letters, redriven = _load(runtime, tenant, selection)
        plan = redrive_plan(letters, selection, dict.fromkeys(redriven))
        done = execute(runtime, plan, tenant, dry_run=dry_run,
                       progress=_progress("checking" if dry_run else "re-driving"))
        return topic, plan, done, len(letters)

    topic, plan, result, total = _run(work)
    if not (plan.todo or plan.done_before or plan.cannot):
        raise fail(_nothing(topic, total), NOTHING_MATCHES)
    failed = [*plan.cannot, *result.failed]
    outcome = "would_redrive" if dry_run else "redriven"
    for item, records in result.redriven:
        print(json.dumps({**item.letter.summary(), "outcome": outcome, "action": item.action,
                          "destination": item.destination, "records": records}))
    for letter in plan.done_before:
        print(json.dumps({**letter.summary(), "outcome": "redriven_before"}))
    for letter, why in failed:
        print(json.dumps({**letter.summary(), "outcome": "not_redriven", "why": why}))
    print(json.dumps({"summary": {
        "dry_run": dry_run,
        "selected": len(plan.todo) + len(plan.done_before) + len(plan.cannot),
        outcome: len(result.redriven), "records": result.records,
        "redriven_before": len(plan.done_before), "not_redriven": len(failed)}}))
    if failed:
        console.print(f"{len(failed)} selected letter(s) not re-driven; see their `why`",
                      soft_wrap=True)
        raise typer.Exit(NOT_ALL_REDRIVEN)

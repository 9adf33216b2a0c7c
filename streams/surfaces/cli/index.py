"""`streams index build --tenant T`: index a tenant's events topic from its cursors to its end.

Workers running rules keep a tenant's index current; this command builds it for a tenant whose
log predates the index (or the workers' index writes), or that ran without such a worker. It
reads the events topic from the index cursors to its current end, decodes each record with
fastavro to a plain record (no Envelope), writes its entries, and advances the cursors every
`--step` events once the entries below them are on the broker: killed midway, a new run
resumes from the last step; run again over an indexed log, it writes nothing.
"""

from __future__ import annotations

import json
import time
from typing import Annotated

import typer

from streams.core.errors import NotFound, StreamsError
from streams.core.tenancy import check_tenant
from streams.surfaces.cli.base import console, fail, settings

__all__ = ["index_app"]

index_app = typer.Typer(no_args_is_help=True,
                        help="A tenant's index topic (what give_feedback looks targets up in).")


@index_app.command("build")
def index_build(
    tenant: Annotated[str, typer.Option(help="The tenant whose index is built.")],
    step: Annotated[int, typer.Option(
        min=1, help="Events between two advances of the cursors (how much a killed build "
        "reads again).")] = 50_000,
) -> None:
    """Index a tenant's events from the index cursors to the log's current end, with a
    progress bar; prints a JSON summary (events, entries, rate) on stdout."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from streams.runtime.root import Runtime

    config = settings()
    runtime = Runtime(config)
    try:
        check_tenant(tenant)
        if tenant not in runtime.admin.tenants():
            raise NotFound(f"no tenant {tenant!r} under prefix {config.topic_prefix!r}: "
                           f"create it with `streams tenant create {tenant}`")
        index = runtime.index(tenant)
        started = time.monotonic()
        with Progress("[progress.description]{task.description}", BarColumn(),
                      MofNCompleteColumn(), TextColumn("{task.fields[rate]} events/s"),
                      TimeElapsedColumn(), TimeRemainingColumn(), console=console) as bar:
            task = bar.add_task(f"indexing {tenant}", total=None, rate="-")

            def progress(run: object) -> None:
                events = getattr(run, "events", 0)
                elapsed = max(time.monotonic() - started, 1e-9)
                bar.update(task, completed=events, total=getattr(run, "total", None),
                           rate=f"{events / elapsed:,.0f}")

            run = index.build(step=step, progress=progress)
        elapsed = time.monotonic() - started
        index.close()
    except StreamsError as exc:
        raise fail(exc) from exc
    finally:
        runtime.close()
    console.print(f"{tenant}: {run.events} events indexed ({run.entries} entries, "
                  f"{run.skipped} not envelopes) in {elapsed:.1f} s; cursors advanced "
                  f"{run.steps} times" if run.events else
                  f"{tenant}: the index is current (nothing to index)")
    print(json.dumps({"tenant": tenant, "events": run.events, "entries": run.entries,
                      "skipped": run.skipped, "steps": run.steps,
                      "seconds": round(elapsed, 3),
                      "events_per_s": round(run.events / elapsed) if run.events else 0,
                      "cursors": {str(p): o for p, o in sorted(run.reached.items())}}))

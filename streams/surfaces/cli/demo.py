"""`streams demo`: demo tenants, a worker and a producer, events in and scores out."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from streams.surfaces.cli.base import ExitCode, handled, settings

__all__ = ["demo"]


def demo(
    tenants: Annotated[list[str] | None, typer.Option("--tenant", help="Demo tenants.")] = None,
    chains: Annotated[int, typer.Option(help="Incidents per tenant.")] = 30,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for all scores.")] = 180.0,
    report_dir: Annotated[Path | None, typer.Option(
        help="Folder for each tenant's dataset and report. Default: streams-<demo "
        "workspace> in the temporary directory.")] = None,
    ui: Annotated[bool, typer.Option(
        "--ui", help="Then print the annotation page's address and a person's key, and keep "
        "the demo running until Ctrl-C.")] = False,
    langfuse: Annotated[bool, typer.Option(
        "--langfuse", help="Send the scores through `streams sink langfuse` into the Langfuse "
        "stand-in (from a clone: standins/) instead of the embedded DuckDB sink.")] = False,
) -> None:
    """Create demo tenants, run a worker and a producer, and show events in and scores out;
    then each tenant's dataset of people's verdicts, the judge's agreement, and its report."""
    # Lazy: the demo pulls in the worker, the sinks and the report.
    from streams.surfaces.demo import run_demo

    with handled():
        ok = run_demo(settings(), tenants or ["acme", "globex"], chains=chains,
                      timeout=timeout, console=Console(), report_dir=report_dir, ui=ui,
                      langfuse=langfuse)
    raise typer.Exit(ExitCode.OK if ok else ExitCode.FAILED)

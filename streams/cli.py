"""The operators' command line: `streams worker`, `streams tenant ...`, `streams schemas ...`,
`streams demo`."""

from __future__ import annotations

import importlib
import json
import os
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from streams.errors import StreamsError
from streams.settings import Settings

app = typer.Typer(no_args_is_help=True, add_completion=False,
                  help="feedback-streams: typed feedback on Kafka, mirrored as scores.")
tenant_app = typer.Typer(no_args_is_help=True, help="Create and list tenants.")
schemas_app = typer.Typer(no_args_is_help=True, help="Generate, check and register schemas.")
app.add_typer(tenant_app, name="tenant")
app.add_typer(schemas_app, name="schemas")
console = Console(stderr=True)

TypesOption = Annotated[
    list[str] | None,
    typer.Option("--types", help="Module that defines feedback types; repeatable. "
                 "Default: $STREAMS_FEEDBACK_MODULES (comma separated)."),
]


def load_types(modules: list[str] | None) -> list[str]:
    """Import the modules that define feedback types, so they register; returns their names."""
    names = list(modules or [])
    if not names:
        names = [m for m in os.environ.get("STREAMS_FEEDBACK_MODULES", "").split(",") if m]
    for name in names:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            raise typer.BadParameter(f"cannot import feedback module {name!r}: {exc}") from exc
    return names


@app.command()
def worker(
    types: TypesOption = None,
    cursor: Annotated[str, typer.Option(help="Consumer group (cursor) name of the mirror.")] = (
        "feedback-mirror"),
    batch_size: Annotated[int, typer.Option(help="Events per batch.")] = 1000,
    stats_interval: Annotated[float, typer.Option(help="Seconds between stats lines; 0: none.")]
    = 0.0,
    loglevel: Annotated[str, typer.Option(help="crit, error, warn, info or debug.")] = "warn",
) -> None:
    """Run a worker: the feedback mirror over every tenant's events topic."""
    from streams.worker import Worker

    load_types(types)
    Worker(Settings.from_env(), cursor=cursor, batch_size=batch_size,
           stats_interval=stats_interval or None).run(loglevel=loglevel)


@tenant_app.command("create")
def tenant_create(
    names: Annotated[list[str], typer.Argument(help="Tenant names.")],
    partitions: Annotated[int | None, typer.Option(help="Partitions per topic.")] = None,
) -> None:
    """Create tenants' topics (idempotent)."""
    from streams.kafka.admin import TenantAdmin

    admin = TenantAdmin(Settings.from_env())
    for name in names:
        try:
            info = admin.create_tenant(name, partitions)
        except StreamsError as exc:
            console.print(f"[red]error:[/red] {exc}")
            raise typer.Exit(2) from exc
        console.print(f"tenant [bold]{name}[/bold]: " + ", ".join(
            f"{t} ({n} partitions)" for t, n in info.partitions.items()))


@tenant_app.command("list")
def tenant_list() -> None:
    """List tenants (those whose events topic exists)."""
    from streams.kafka.admin import TenantAdmin

    for name in TenantAdmin(Settings.from_env()).tenants():
        print(name)


SCHEMA_DIR = Path("schemas")


@schemas_app.command("write")
def schemas_write(
    types: TypesOption = None,
    directory: Annotated[Path, typer.Option(help="Where schemas live.")] = SCHEMA_DIR,
) -> None:
    """Write the current schemas as new versions where they changed."""
    from streams.schemafiles import write_schemas

    load_types(types)
    for path in write_schemas(directory):
        console.print(f"wrote {path}")


@schemas_app.command("check")
def schemas_check(
    types: TypesOption = None,
    directory: Annotated[Path, typer.Option(help="Where schemas live.")] = SCHEMA_DIR,
) -> None:
    """Fail if a model drifted from its committed schema, or a version breaks compatibility."""
    from streams.schemafiles import check_schemas

    load_types(types)
    problems = check_schemas(directory)
    for problem in problems:
        console.print(f"[red]{problem}[/red]")
    if problems:
        raise typer.Exit(1)
    console.print("schemas match their models and are backward compatible")


@schemas_app.command("register")
def schemas_register(types: TypesOption = None) -> None:
    """Register every schema in the schema registry, with BACKWARD compatibility."""
    from streams.avro.serde import AvroSerde

    load_types(types)
    serde = AvroSerde(Settings.from_env().schema_registry_url)
    print(json.dumps(serde.register_all(), indent=2))


@app.command()
def demo(
    tenants: Annotated[list[str] | None, typer.Option("--tenant", help="Demo tenants.")] = None,
    chains: Annotated[int, typer.Option(help="Incident chains per tenant.")] = 200,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for all scores.")] = 120.0,
) -> None:
    """Create demo tenants, run a worker and a producer, and show events in and scores out."""
    from streams.demo import run_demo

    ok = run_demo(Settings.from_env(), tenants or ["acme", "globex"], chains=chains,
                  timeout=timeout, console=Console())
    raise typer.Exit(0 if ok else 1)


def main() -> None:
    """Entry point of the `streams` command."""
    app()


if __name__ == "__main__":
    main()

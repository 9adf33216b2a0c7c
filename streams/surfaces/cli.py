"""The operators' command line: `streams worker`, `streams tenant ...`, `streams schemas ...`,
`streams sink langfuse | duckdb`, `streams rules ...` (cli_rules), `streams deadletters ...`
(cli_deadletters), `streams report`, `streams demo`, `streams keys ...`, `streams serve`,
`streams mcp`."""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from streams.core.errors import ConfigError, MissingExtra, StreamsError, ValidationFailed
from streams.settings import Settings, markdown_table
from streams.surfaces import cli_mcp
from streams.surfaces.cli_deadletters import deadletters_app
from streams.surfaces.cli_rules import rules_app
from streams.surfaces.tenants import tenant_app

app = typer.Typer(no_args_is_help=True, add_completion=False,
                  help="feedback-streams: typed feedback on Kafka, mirrored as scores.")
schemas_app = typer.Typer(no_args_is_help=True, help="Generate, check and register schemas.")
app.add_typer(tenant_app, name="tenant")
app.add_typer(schemas_app, name="schemas")
sink_app = typer.Typer(no_args_is_help=True, help="Run score sinks; sync score configs.")
app.add_typer(sink_app, name="sink")
app.add_typer(rules_app, name="rules")
app.add_typer(deadletters_app, name="deadletters")
console = Console(stderr=True)

TypesOption = Annotated[
    list[str] | None,
    typer.Option("--types", help="Module that defines feedback types; repeatable. "
                 "Default: $STREAMS_FEEDBACK_MODULES (comma separated)."),
]


def settings() -> Settings:
    """The settings from the environment; a bad value ends the command (exit 2) with the
    message naming the variable."""
    try:
        return Settings.from_env()
    except ConfigError as exc:
        console.print(f"[red]configuration error:[/red] {exc}")
        raise typer.Exit(2) from exc


def load_types(modules: list[str] | None) -> list[str]:
    """Import the modules that define feedback types, so they register; returns their names."""
    names = list(modules or settings().feedback_modules)
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
    batch_size: Annotated[int | None, typer.Option(
        help="Events per batch. Default: $STREAMS_MIRROR_BATCH_SIZE.")] = None,
    stats_interval: Annotated[float, typer.Option(help="Seconds between stats lines; 0: none.")]
    = 0.0,
    loglevel: Annotated[str, typer.Option(help="crit, error, warn, info or debug.")] = "warn",
    rules: Annotated[list[str] | None, typer.Option(
        "--rules", help="Module with RULES (list of Rule), ACTIONS (name -> action) and "
        "optionally DEPS; repeatable. Default: $STREAMS_RULE_MODULES.")] = None,
    proposal_outcome: Annotated[bool | None, typer.Option(
        "--proposal-outcome/--no-proposal-outcome", help="Also run the shipped "
        "proposal-outcome rule (streams.core.proposals.rule). Default: "
        "$STREAMS_PROPOSAL_OUTCOME.")] = None,
) -> None:
    """Run a worker: the feedback mirror, and the rules reactor when rules are given."""
    from streams.runtime.worker.app import Worker

    load_types(types)
    found_rules, actions, deps = load_rules(with_proposal_outcome(rules, proposal_outcome))
    Worker(settings(), cursor=cursor, batch_size=batch_size,
           stats_interval=stats_interval or None, rules=found_rules, actions=actions,
           deps=deps).run(loglevel=loglevel)


PROPOSAL_OUTCOME_MODULE = "streams.core.proposals.rule"


def with_proposal_outcome(modules: list[str] | None, enabled: bool | None) -> list[str]:
    """The worker's rules modules (`--rules`, else $STREAMS_RULE_MODULES), with the shipped
    proposal-outcome rule's module added when enabled (`--proposal-outcome`, else
    $STREAMS_PROPOSAL_OUTCOME=on) and not named already."""
    names = list(modules or settings().rule_modules)
    if enabled is None:
        enabled = settings().proposal_outcome == "on"
    if enabled and PROPOSAL_OUTCOME_MODULE not in names:
        names.append(PROPOSAL_OUTCOME_MODULE)
    return names


def load_rules(modules: list[str] | None) -> tuple[list[Any], dict[str, Any], dict[str, Any]]:
    """Rules, actions and deps from modules exposing RULES, ACTIONS and DEPS."""
    names = list(modules or settings().rule_modules)
    rules: list[Any] = []
    actions: dict[str, Any] = {}
    deps: dict[str, Any] = {}
    for name in names:
        try:
            module = importlib.import_module(name)
        except ImportError as exc:
            raise typer.BadParameter(f"cannot import rules module {name!r}: {exc}") from exc
        rules += list(getattr(module, "RULES", []))
        actions.update(getattr(module, "ACTIONS", {}))
        deps.update(getattr(module, "DEPS", {}))
    from streams.core.rules import RuleSet

    try:
        # The worker checks this too; here the operator gets the reason, not a traceback.
        RuleSet(rules).check_event_types()
    except ValidationFailed as exc:
        raise typer.BadParameter(f"rules in {', '.join(names)}: {exc}") from exc
    return rules, actions, deps


SCHEMA_DIR = Path("schemas")

SchemaTypesOption = Annotated[
    list[str] | None,
    typer.Option("--types", help="Module that defines your feedback types; repeatable. Only "
                 "their feedback_given records are handled. Default: the project's own "
                 "records and the feedback types it ships."),
]
SchemaDirOption = Annotated[
    Path, typer.Option("--dir", "--directory", help="Where the schema files live.")]


def _fail(exc: StreamsError, code: int) -> typer.Exit:
    """Print an error's message (unwrapped, brackets kept) and give the exit to raise."""
    console.print(f"[red]error:[/red] {escape(str(exc))}", soft_wrap=True)
    return typer.Exit(code)


def _schemas_of(types: list[str] | None) -> dict[str, Any]:
    """The schemas `--types` names (default: the project's), or a clear error and exit 2."""
    from streams.adapters.avro.files import current_schemas

    try:
        return current_schemas(types or None)
    except StreamsError as exc:
        raise _fail(exc, 2) from exc


@schemas_app.command("write")
def schemas_write(
    types: SchemaTypesOption = None,
    directory: SchemaDirOption = SCHEMA_DIR,
) -> None:
    """Write the current schemas as new versions where they changed; a version that breaks
    backward compatibility is refused."""
    from streams.adapters.avro.files import write_rule_schema, write_schemas

    schemas = _schemas_of(types)
    try:
        written = write_schemas(directory, schemas) + ([] if types else
                                                       write_rule_schema(directory))
    except StreamsError as exc:
        raise _fail(exc, 1) from exc
    for path in written:
        console.print(f"wrote {path}")
    if not written:
        console.print(f"{directory}: every schema is up to date")


@schemas_app.command("check")
def schemas_check(
    types: SchemaTypesOption = None,
    directory: SchemaDirOption = SCHEMA_DIR,
) -> None:
    """Fail if a model drifted from its committed schema, or a version breaks compatibility."""
    from streams.adapters.avro.files import check_rule_schema, check_schemas

    problems = check_schemas(directory, _schemas_of(types)) + ([] if types else
                                                              check_rule_schema(directory))
    for problem in problems:
        console.print(f"[red]{escape(problem)}[/red]", soft_wrap=True)
    if problems:
        raise typer.Exit(1)
    console.print("schemas match their models and are backward compatible")


@schemas_app.command("register")
def schemas_register(types: SchemaTypesOption = None) -> None:
    """Register the schemas in the schema registry, with BACKWARD compatibility."""
    from streams.adapters.avro.serde import AvroSerde

    schemas = _schemas_of(types)
    serde = AvroSerde(settings())
    try:
        subjects = serde.register_schemas(schemas)
    except StreamsError as exc:
        raise _fail(exc, 1) from exc
    print(json.dumps(subjects, indent=2))


def _langfuse_client(config: Settings) -> Any:
    from langfuse import Langfuse

    missing = [variable for variable, value in (
        ("LANGFUSE_PUBLIC_KEY", config.langfuse_public_key),
        ("LANGFUSE_SECRET_KEY", config.langfuse_secret_key)) if not value]
    if missing:
        raise typer.BadParameter(f"set {', '.join(missing)} (and LANGFUSE_HOST)")
    # base_url, not host: the SDK lets its own LANGFUSE_BASE_URL variable beat `host`.
    return Langfuse(public_key=config.langfuse_public_key,
                    secret_key=config.langfuse_secret_key,
                    base_url=config.langfuse_host or None, tracing_enabled=False)


CursorOption = Annotated[str, typer.Option(help="Cursor (consumer group) name.")]
NoCursorOption = Annotated[bool, typer.Option(
    "--no-cursor", help="Keep no cursor: commit nothing, read from the beginning.")]
ReplayOption = Annotated[bool, typer.Option(help="Read from the beginning; the cursor stays "
                                            "until the replay passes it.")]
BatchOption = Annotated[int | None, typer.Option(
    help="Scores per batch. Default: $STREAMS_SINK_BATCH_SIZE.")]
StatsOption = Annotated[float, typer.Option(help="Seconds between stats lines; 0: none.")]


async def _run_sink(config: Settings, sink: Any, *, cursor: str | None, replay: bool,
                    batch_size: int, stats_interval: float) -> None:
    """Run a sink under the sink runner until SIGTERM or SIGINT; print its stats as JSON
    lines (every `stats_interval` seconds when given, and once at the end)."""
    import asyncio
    import signal

    from streams.adapters.tracing import configure_tracing
    from streams.runtime.sink.runner import OutageTooLong, SinkRunner, serve_sink

    configure_tracing(config.otlp_traces_endpoint, "streams-sink")
    runner = SinkRunner(config, sink, cursor=cursor, replay=replay, batch_size=batch_size)
    health = serve_sink(runner)  # metrics exported, /healthz and /readyz served
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, runner.stop)

    async def report() -> None:
        while True:
            await asyncio.sleep(stats_interval)
            print(json.dumps({"sink_stats": runner.stats.__dict__}), flush=True)

    reporter = asyncio.create_task(report()) if stats_interval else None
    try:
        await runner.run()
    except OutageTooLong as exc:
        print(json.dumps({"sink_stats": runner.stats.__dict__}), flush=True)
        console.print(f"[red]error:[/red] {escape(str(exc))}")
        raise typer.Exit(75) from exc  # EX_TEMPFAIL: start it again once it is back
    finally:
        if reporter is not None:
            reporter.cancel()
        if health is not None:
            health.stop()
    print(json.dumps({"sink_stats": runner.stats.__dict__}), flush=True)


@sink_app.command("langfuse")
def sink_langfuse(
    types: TypesOption = None,
    cursor: Annotated[str, typer.Option(help="Cursor (consumer group) name.")] = "langfuse",
    no_cursor: Annotated[bool, typer.Option(
        "--no-cursor", help="Keep no cursor: commit nothing, read from the beginning.")] = False,
    replay: Annotated[bool, typer.Option(help="Read from the beginning; the cursor stays "
                                         "until the replay passes it.")] = False,
    batch_size: Annotated[int | None, typer.Option(
        help="Scores per batch. Default: $STREAMS_SINK_BATCH_SIZE.")] = None,
    sync_configs: Annotated[bool, typer.Option(help="Create missing score configs first.")]
    = True,
    stats_interval: Annotated[float, typer.Option(help="Seconds between stats lines; 0: none.")]
    = 0.0,
) -> None:
    """Mirror every tenant's scores into Langfuse (LANGFUSE_HOST, LANGFUSE_PUBLIC_KEY,
    LANGFUSE_SECRET_KEY)."""
    import asyncio

    from streams.adapters.langfuse import LangfuseScoreConfigStore, LangfuseScoreSink
    from streams.core.sinks.configs import sync_score_configs

    load_types(types)
    config = settings()
    client = _langfuse_client(config)
    batch = batch_size or config.sink_batch_size
    sink = LangfuseScoreSink(
        client, batch_size=batch, timeout=config.langfuse_timeout,
        concurrency=config.langfuse_concurrency,
        identity=f"langfuse:{config.langfuse_host or ''}:{config.langfuse_public_key}")

    async def main() -> None:
        if sync_configs:
            try:
                created = await sync_score_configs(LangfuseScoreConfigStore(client))
            except StreamsError as exc:
                console.print(f"[red]error:[/red] {exc}")
                raise typer.Exit(2) from exc
            if created:
                console.print(f"created score configs: {', '.join(created)}")
        await _run_sink(config, sink, cursor=None if no_cursor else cursor, replay=replay,
                        batch_size=batch, stats_interval=stats_interval)
    asyncio.run(main())


@sink_app.command("sync-configs")
def sink_sync_configs(types: TypesOption = None) -> None:
    """Create in Langfuse the score configs of every registered feedback type it lacks."""
    import asyncio

    from streams.adapters.langfuse import LangfuseScoreConfigStore
    from streams.core.sinks.configs import sync_score_configs

    load_types(types)
    try:
        created = asyncio.run(sync_score_configs(
            LangfuseScoreConfigStore(_langfuse_client(settings()))))
    except StreamsError as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from exc
    print(json.dumps({"created": created}))


@sink_app.command("duckdb")
def sink_duckdb(
    path: Annotated[Path, typer.Option("--path", help="The DuckDB file (created when "
                                       "missing).")],
    types: TypesOption = None,
    cursor: CursorOption = "warehouse",
    no_cursor: NoCursorOption = False,
    replay: ReplayOption = False,
    batch_size: BatchOption = None,
    stats_interval: StatsOption = 0.0,
) -> None:
    """Mirror every tenant's scores into a DuckDB file (table `scores`), for SQL."""
    import asyncio

    from streams.adapters.duckdb import DuckDBScoreSink

    load_types(types)
    config = settings()
    sink = DuckDBScoreSink(path)
    try:
        # Open the file now: a file another process writes to is an error here, not retries.
        sink.query("select count(*) from scores")
    except StreamsError as exc:
        raise _fail(exc, 2) from exc
    console.print(f"DuckDB sink: {sink.identity}, cursor "
                  f"{'(none)' if no_cursor else cursor}{' (replay)' if replay else ''}")
    try:
        asyncio.run(_run_sink(config, sink, cursor=None if no_cursor else cursor,
                              replay=replay, batch_size=batch_size or config.sink_batch_size,
                              stats_interval=stats_interval))
    except StreamsError as exc:
        raise _fail(exc, 2) from exc
    finally:
        sink.close()


@app.command()
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
    types: TypesOption = None,
) -> None:
    """Measure a workspace from its tenant's log: rule outcomes, time to resolution, judge
    agreement, quality; writes OUT/report.json and OUT/report.html (self-contained)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    from streams.runtime.root import Runtime
    from streams.surfaces.report.model import check_window, parse_quality, parse_time
    from streams.surfaces.report.run import make_report

    load_types(types)
    config = settings()
    try:
        start = parse_time(since, "--since") if since else None
        end = parse_time(until, "--until") if until else None
        check_window(start, end)
        parse_quality(quality_of)
    except StreamsError as exc:
        raise _fail(exc, 2) from exc
    runtime = Runtime(config)
    try:
        with Progress("[progress.description]{task.description}", BarColumn(),
                      MofNCompleteColumn(), TimeElapsedColumn(), console=console,
                      transient=False) as bar:
            # Shown once the end offsets are known, so an unknown tenant prints no bar.
            task = bar.add_task(f"reading {tenant}'s log", total=None, visible=False)

            def progress(done: int, total: int) -> None:
                bar.update(task, completed=done, total=total, visible=True)

            files = make_report(runtime, tenant, workspace, out=out, since=start, until=end,
                                resolves=resolves, quality_of=quality_of, progress=progress)
    except StreamsError as exc:
        raise _fail(exc, 2) from exc
    finally:
        runtime.close()
    summary = files.report
    console.print(f"{summary['events']} events of {tenant}/{workspace}: "
                  f"{len(summary['rule_outcomes'])} rules, "
                  f"{summary['time_to_resolution']['chains']} chains resolved, "
                  f"{len(summary['judge_agreement'])} judge agreement rows, "
                  f"{len(summary['quality']['agents'])} agents with quality")
    print(json.dumps({"json": str(files.json_path), "html": str(files.html_path)}))


@app.command()
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
    from streams.surfaces.demo import run_demo

    try:
        ok = run_demo(settings(), tenants or ["acme", "globex"], chains=chains,
                      timeout=timeout, console=Console(), report_dir=report_dir, ui=ui,
                      langfuse=langfuse)
    except MissingExtra:
        raise  # main() prints it, with its own exit status
    except StreamsError as exc:
        raise _fail(exc, 2) from exc
    raise typer.Exit(0 if ok else 1)


@app.command("settings")
def show_settings(
    markdown: Annotated[bool, typer.Option(
        "--markdown", help="Print the configuration table of docs/running.md instead.")]
    = False,
) -> None:
    """Print every setting's variable and its value here (secrets masked)."""
    if markdown:
        print(markdown_table(), end="")
        return
    for variable, value in settings().shown().items():
        print(f"{variable}={value}")


from streams.surfaces.cli_keys import keys_app  # noqa: E402  (uses this module's helpers)
from streams.surfaces.cli_serve import serve  # noqa: E402

app.add_typer(keys_app, name="keys")
app.command("serve")(serve)


def main() -> None:
    """Entry point of the `streams` command."""
    try:
        app()
    except MissingExtra as exc:  # a command's optional libraries: one line, not a traceback
        console.print(f"[red]error:[/red] {escape(str(exc))}", soft_wrap=True)
        raise SystemExit(exc.exit_code) from exc


app.command("mcp")(cli_mcp.mcp)


if __name__ == "__main__":
    main()

"""`streams sink langfuse | duckdb | sync-configs`: mirror every tenant's scores into a score
backend under the sink runner."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer

from streams.core.errors import StreamsError
from streams.settings import Settings
from streams.surfaces.cli.base import (
    ExitCode,
    LangfuseUnreachable,
    TypesOption,
    check_broker,
    console,
    fail,
    handled,
    is_transport_error,
    load_types,
    settings,
)

__all__ = ["sink_app"]

sink_app = typer.Typer(no_args_is_help=True, help="Run score sinks; sync score configs.")


def _langfuse_client(config: Settings) -> Any:
    from streams.runtime.root import Runtime

    missing = [variable for variable, value in (
        ("LANGFUSE_PUBLIC_KEY", config.langfuse_public_key),
        ("LANGFUSE_SECRET_KEY", config.langfuse_secret_key)) if not value]
    if missing:
        raise fail(f"set {', '.join(missing)} (and LANGFUSE_HOST) to the Langfuse project's "
                   "keys", ExitCode.CONFIG)
    return Runtime(config).langfuse()


@contextmanager
def _langfuse_reached(config: Settings) -> Iterator[None]:
    """A Langfuse that does not answer becomes one line naming LANGFUSE_HOST (the SDK's
    transport errors are not wrapped by it)."""
    try:
        yield
    except Exception as exc:
        if not is_transport_error(exc):
            raise
        where = config.langfuse_host or "the SDK's default host (LANGFUSE_BASE_URL)"
        raise LangfuseUnreachable(
            f"cannot reach Langfuse at {where}: {exc}; check LANGFUSE_HOST and that Langfuse "
            "is up, or run without it (`streams sink duckdb --path scores.duckdb`)") from exc


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
    from streams.runtime.root import Runtime
    from streams.runtime.sink.runner import OutageTooLong, SinkRunner, serve_sink

    # Fail now, in one line, if no broker answers: the runner would wait for one.
    await asyncio.to_thread(check_broker, config)
    configure_tracing(config.otlp_traces_endpoint, "streams-sink")
    runtime = Runtime(config)
    runner = SinkRunner(runtime, sink, cursor=cursor, replay=replay, batch_size=batch_size)
    health = serve_sink(runner)  # metrics exported, /healthz and /readyz served
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, runner.stop)

    async def report() -> None:
        while True:
            await asyncio.sleep(stats_interval)
            print(json.dumps({"sink_stats": runner.stats.__dict__}), flush=True)

    reporter = asyncio.create_task(report()) if stats_interval else None
    runtime.started()
    try:
        await runner.run()
    except OutageTooLong as exc:
        print(json.dumps({"sink_stats": runner.stats.__dict__}), flush=True)
        # EX_TEMPFAIL: start it again once the backend is back.
        raise fail(exc, ExitCode.OUTAGE_TOO_LONG) from exc
    finally:
        if reporter is not None:
            reporter.cancel()
        if health is not None:
            health.stop()
        runtime.close()
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
    """Mirror every tenant's scores into Langfuse: one project for all (LANGFUSE_HOST,
    LANGFUSE_PUBLIC_KEY, LANGFUSE_SECRET_KEY), or each tenant into its own project
    (STREAMS_LANGFUSE_PROJECTS; a tenant it lacks has its scores dead-lettered)."""
    import asyncio

    from streams.adapters.langfuse import (
        LangfuseScoreConfigStore,
        LangfuseScoreSink,
        read_projects,
    )
    from streams.core.sinks.configs import sync_score_configs
    from streams.core.sinks.routed import TenantRouted
    from streams.runtime.root import Runtime

    load_types(types)
    config = settings()
    batch = batch_size or config.sink_batch_size

    def sink_of(client: Any, host: str | None, public_key: str | None) -> LangfuseScoreSink:
        return LangfuseScoreSink(
            client, batch_size=batch, timeout=config.langfuse_timeout,
            concurrency=config.langfuse_concurrency,
            identity=f"langfuse:{host or ''}:{public_key}")

    if config.langfuse_projects:
        try:
            projects = read_projects(config.langfuse_projects)
        except StreamsError as exc:
            raise fail(exc, ExitCode.CONFIG) from exc
        runtime = Runtime(config)
        clients = {tenant: runtime.langfuse(project) for tenant, project in projects.items()}
        sink: Any = TenantRouted(
            {tenant: sink_of(clients[tenant], project.host or config.langfuse_host,
                             project.public_key) for tenant, project in projects.items()},
            unrouted="tenant {tenant!r} has no Langfuse project in STREAMS_LANGFUSE_PROJECTS "
                     f"({config.langfuse_projects}): add its keys there and replay the "
                     "dead letters")
        console.print(f"Langfuse sink: a project per tenant for {', '.join(sorted(projects))}")
    else:
        client = _langfuse_client(config)
        clients = {"": client}
        sink = sink_of(client, config.langfuse_host, config.langfuse_public_key)

    async def main() -> None:
        if sync_configs:
            for client in clients.values():
                with handled(), _langfuse_reached(config):
                    created = await sync_score_configs(LangfuseScoreConfigStore(client))
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
    config = settings()
    with handled(), _langfuse_reached(config):
        created = asyncio.run(sync_score_configs(
            LangfuseScoreConfigStore(_langfuse_client(config))))
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
        raise fail(exc, ExitCode.USAGE) from exc
    console.print(f"DuckDB sink: {sink.identity}, cursor "
                  f"{'(none)' if no_cursor else cursor}{' (replay)' if replay else ''}")
    try:
        asyncio.run(_run_sink(config, sink, cursor=None if no_cursor else cursor,
                              replay=replay, batch_size=batch_size or config.sink_batch_size,
                              stats_interval=stats_interval))
    except StreamsError as exc:
        raise fail(exc) from exc
    finally:
        sink.close()



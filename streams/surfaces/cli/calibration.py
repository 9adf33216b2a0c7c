"""`streams calibration show | follow`: how far each judge agrees with people lately, and the
keeper that raises alarms when one falls below its threshold.

    streams calibration show --tenant acme --workspace prod     # one JSON object
    streams calibration follow                                  # every tenant, until SIGTERM

`follow` runs the calibration keeper (streams.runtime.jobs.calibration): one process per
deployment is enough (its state is the alarm events in the log); it serves /healthz,
/readyz and /metrics (the `streams_calibration_*` gauges) on STREAMS_HEALTH_PORT. The
thresholds are STREAMS_CALIBRATION_THRESHOLDS (docs/measures.md).
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from streams.surfaces.cli.base import (
    TenantOption,
    TypesOption,
    handled,
    load_types,
    require_tenant,
    run_for_tenant,
    settings,
)

__all__ = ["calibration_app"]

calibration_app = typer.Typer(
    no_args_is_help=True,
    help="How far each judge agrees with people lately; alarms when one falls below its "
         "threshold.")


@calibration_app.command("show")
def calibration_show(
    tenant: TenantOption,
    workspace: Annotated[str, typer.Option("--workspace", help="The workspace measured.")],
    types: TypesOption = None,
) -> None:
    """Each evaluator version's calibration in a workspace now, as JSON: its measure over
    its newest pairs with people, the interval, and its alarm state."""
    from streams.core.measures.calibration import calibration_json
    from streams.runtime.client.workspace import StreamsClient

    load_types(types)
    policy = settings().calibration_policy()

    async def main(runtime: Any) -> dict[str, Any]:
        client = StreamsClient(runtime)
        rows = await client.workspace(tenant, workspace).calibration(policy)
        return {"tenant": tenant, "workspace": workspace, "window": policy.window,
                "min_pairs": policy.min_pairs, "margin": policy.margin,
                "calibration": [calibration_json(r) for r in rows]}

    print(json.dumps(run_for_tenant(main, tenant), indent=2))


@calibration_app.command("follow")
def calibration_follow(
    tenant: Annotated[list[str] | None, typer.Option(
        "--tenant", help="A tenant to keep; repeatable. Default: every tenant, found each "
        "pass.")] = None,
    interval: Annotated[float, typer.Option(
        min=0.1, help="Seconds between passes.")] = 1.0,
    enqueue: Annotated[bool, typer.Option(
        help="Whether an alarm installs a queue of the version's disagreements with "
             "people.")] = True,
    types: TypesOption = None,
) -> None:
    """Keep every evaluator version's calibration current and write a calibration:alarm
    event when one falls below its threshold or comes back; prints each change as a JSON
    line. Stops on SIGTERM or SIGINT."""
    import asyncio
    import signal

    from streams.core.measures.calibration import calibration_json
    from streams.runtime.client.workspace import StreamsClient
    from streams.runtime.jobs.calibration import CalibrationKeeper
    from streams.runtime.jobs.queues import QueueBook
    from streams.runtime.observe.health import serve_health
    from streams.runtime.root import Runtime

    load_types(types)
    config = settings()
    with handled():
        policy = config.calibration_policy()
    runtime = Runtime(config)
    queues = QueueBook(runtime, follow=True)
    health = None

    async def main() -> None:
        nonlocal health
        client = StreamsClient(runtime)
        keeper = CalibrationKeeper(client, queues, policy, tenants=tenant, enqueue=enqueue)
        runtime.metrics.watch_calibration(keeper)
        # Ready while the broker and registry answer and the last pass did not fail.
        health = serve_health(config, [], {**runtime.server_checks(),
                                           "calibration": keeper.ready})
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await keeper.run(stop, interval=interval, on_change=lambda change: print(
            json.dumps({"tenant": change.tenant, "workspace": change.workspace,
                        "event_id": change.event_id, "queue": change.queue,
                        **calibration_json(change.row)}), flush=True))

    try:
        with handled():
            for name in tenant or ():
                require_tenant(runtime, name)
        asyncio.run(main())
    finally:
        if health is not None:
            health.stop()
        queues.close()
        runtime.close()

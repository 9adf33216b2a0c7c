"""`streams views build`: build or catch up a tenant's materialized read view.

    streams views build --tenant acme

The view (docs/design.md, "Materialized read views") is what `ws.runs()`, `ws.feedback()`
and the REST runs and feedback routes read; a process builds its own on first use. Running
this first, with the same STREAMS_STATE_DIR as the process that will read (`streams serve`,
say), moves that one-off cost out of the first request. Resumable (a killed build goes on
from its checkpoint) and idempotent (a built view only catches up).
"""

from __future__ import annotations

import json
from typing import Annotated

import typer

from streams.core.errors import StreamsError
from streams.surfaces.cli.base import counted, fail, require_tenant, settings

__all__ = ["views_app"]

views_app = typer.Typer(no_args_is_help=True,
                        help="Build the materialized read views runs and feedback read.")


@views_app.command("build")
def views_build(
    tenant: Annotated[str, typer.Option(help="The tenant whose view is built.")],
) -> None:
    """Build (or catch up) a tenant's read view in STREAMS_STATE_DIR from its events topic,
    with a progress bar; prints what was applied as a JSON line."""
    from streams.runtime.client.views import build_view, view_path
    from streams.runtime.root import Runtime

    config = settings()
    runtime = Runtime(config)
    try:
        require_tenant(runtime, tenant)
        with counted(f"building {tenant}'s view") as progress:
            done = build_view(runtime, tenant, progress=progress)
    except StreamsError as exc:
        raise fail(exc) from exc
    finally:
        runtime.close()
    print(json.dumps({"tenant": tenant, "view": str(view_path(config, tenant)),
                      "applied": done.applied, "skipped": done.skipped,
                      "rebuilt": done.rebuilt, "seconds": round(done.seconds, 2)}))

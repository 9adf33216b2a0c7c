"""`streams queues ...`: annotation queues as data (streams.core.queues). Install a queue from
its JSON form (`install FILE.json`), archive it (`archive NAME`), and list a workspace's queues
(`list`). Each command prints one JSON object on stdout; a failure is one line naming what to
fix and its kind's exit code (streams.surfaces.cli.base.ExitCode: 2 a refusal, 5 an unknown
tenant or queue, 6 a module that cannot be used, 10 the broker cannot be reached).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Annotated, Any

import typer

from streams.surfaces.cli.base import (
    TenantOption,
    TypesOption,
    fail,
    handled,
    load_types,
    run_for_tenant,
)

__all__ = ["queues_app"]

queues_app = typer.Typer(no_args_is_help=True,
                         help="Annotation queues as data: install, archive, list.")

WorkspaceOption = Annotated[str, typer.Option("--workspace", help="The queue's workspace.")]
ByOption = Annotated[str | None, typer.Option(
    "--by", help="Who does it, as a participant (user:<id>, agent:<id>); the system by "
    "default.")]


def _actor(by: str | None) -> Any:
    from streams.core.actors import actor_from_participant

    if by is None:
        return None
    with handled():
        return actor_from_participant(by)


def _print(data: Any) -> None:
    print(json.dumps(data, indent=2))


@queues_app.command("list")
def queues_list(
    tenant: TenantOption,
    workspace: WorkspaceOption,
    all_: Annotated[bool, typer.Option("--all", help="Archived queues too.")] = False,
) -> None:
    """A workspace's queues (newest entry per queue), as JSON."""
    from streams.core.queues import entry_json
    from streams.runtime.jobs.queues import QueueBook

    async def main(runtime: Any) -> list[dict[str, Any]]:
        found = await asyncio.to_thread(QueueBook(runtime).queues, tenant, workspace,
                                        archived=all_)
        return [entry_json(e) for e in found]

    _print(run_for_tenant(main, tenant))


@queues_app.command("install")
def queues_install(
    file: Annotated[Path, typer.Argument(help="The queue's JSON form "
                                              "(schemas/queue/v1.schema.json).")],
    tenant: TenantOption,
    workspace: WorkspaceOption,
    types: TypesOption = None,
    by: ByOption = None,
) -> None:
    """Install a queue in a workspace; its feedback types must be defined in the --types
    modules. Installing the same definition again writes nothing (`repeat`: true)."""
    from streams.core.queues import InvalidQueue, entry_json
    from streams.runtime.jobs.queues import QueueBook

    load_types(types)
    try:
        definition = json.loads(file.read_text())
    except OSError as exc:
        raise typer.BadParameter(f"cannot read {file}: {exc}") from exc
    except json.JSONDecodeError as exc:
        raise fail(f"{file}: queue JSON is not valid JSON: {exc.msg} at line {exc.lineno} "
                   f"column {exc.colno}", 2) from exc
    actor = _actor(by)

    async def main(runtime: Any) -> dict[str, Any]:
        try:
            done = await QueueBook(runtime).install(tenant, workspace, definition,
                                                    actor=actor)
        except InvalidQueue as exc:
            raise InvalidQueue(f"{file}: {exc}") from exc
        return {**entry_json(done.entry), "repeat": done.repeat}

    _print(run_for_tenant(main, tenant))


@queues_app.command("archive")
def queues_archive(
    name: Annotated[str, typer.Argument(help="The live queue's name.")],
    tenant: TenantOption,
    workspace: WorkspaceOption,
    by: ByOption = None,
) -> None:
    """Archive a live queue of a workspace."""
    from streams.core.queues import entry_json
    from streams.runtime.jobs.queues import QueueBook

    actor = _actor(by)

    async def main(runtime: Any) -> dict[str, Any]:
        return entry_json(await QueueBook(runtime).archive(tenant, workspace, name,
                                                            actor=actor))

    _print(run_for_tenant(main, tenant))

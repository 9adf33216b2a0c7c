"""`streams mcp`: the MCP tools (give_feedback, list_runs, read_feedback) over stdio.

An MCP client launches it as a subprocess; every call acts with the API key in
STREAMS_MCP_KEY (its tenant, actor and capabilities), exactly as the same key would over
streamable HTTP at `streams serve`'s `/mcp`.
"""

from __future__ import annotations

import importlib
from typing import Annotated

import typer
from rich.console import Console

from streams.core.errors import ConfigError
from streams.settings import Settings

__all__ = ["mcp"]


console = Console(stderr=True)


def mcp(
    types: Annotated[list[str] | None, typer.Option(
        "--types", help="Module that defines feedback types; repeatable. Default: "
        "$STREAMS_FEEDBACK_MODULES (comma separated).")] = None,
    key: Annotated[str | None, typer.Option(
        help="The API key to act with. Default: $STREAMS_MCP_KEY (prefer it: an argument "
        "shows in the process list).")] = None,
) -> None:
    """Serve the MCP tools over stdio (for an MCP client that launches this command)."""
    from streams.extras import needs
    from streams.runtime.client.commands import CommandService
    from streams.runtime.client.keys import KeyStore
    from streams.runtime.client.workspace import StreamsClient

    with needs("mcp", "streams mcp"):
        import anyio

        from streams.surfaces.http.mcp import mcp_server

    try:
        config = Settings.from_env()
    except ConfigError as exc:
        console.print(f"[red]configuration error:[/red] {exc}")
        raise typer.Exit(2) from exc
    for name in types or config.feedback_modules:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            raise typer.BadParameter(f"cannot import feedback module {name!r}: {exc}") from exc
    token = key or config.mcp_key
    if not token:
        console.print("[red]no API key:[/red] set STREAMS_MCP_KEY to a key from "
                      "`streams keys create`")
        raise typer.Exit(2)
    client = StreamsClient(config)
    keys = KeyStore(config, client.log.producer)
    try:
        keys.start()
        anyio.run(mcp_server(CommandService(client, keys), key=token).run_stdio_async)
    finally:
        keys.close()
        client.close()

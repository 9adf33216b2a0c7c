"""`streams mcp`: the MCP tools (give_feedback, list_runs, read_feedback) over stdio.

An MCP client launches it as a subprocess; every call acts with the API key in
STREAMS_MCP_KEY (its tenant, actor and capabilities), exactly as the same key would over
streamable HTTP at `streams serve`'s `/mcp`.
"""

from __future__ import annotations

import functools
from typing import Annotated

import typer

from streams.surfaces.cli.base import ExitCode, TypesOption, fail, load_types, settings

__all__ = ["mcp"]


def mcp(
    types: TypesOption = None,
    key: Annotated[str | None, typer.Option(
        help="The API key to act with. Default: $STREAMS_MCP_KEY (prefer it: an argument "
        "shows in the process list).")] = None,
) -> None:
    """Serve the MCP tools over stdio (for an MCP client that launches this command)."""
    from streams.extras import needs
    from streams.runtime.root import Runtime

    # Lazy: the MCP SDK and anyio are loaded by `mcp` only (the 'mcp' extra).
    with needs("mcp", "streams mcp"):
        import anyio

        from streams.surfaces.http.mcp import serve_stdio

    config = settings()
    load_types(types)
    token = key or config.mcp_key
    if not token:
        raise fail("no API key: set STREAMS_MCP_KEY to a key from `streams keys create`",
                   ExitCode.CONFIG)
    runtime = Runtime(config)  # every client comes from the composition root
    try:
        anyio.run(functools.partial(serve_stdio, runtime, key=token))
    finally:
        runtime.close()

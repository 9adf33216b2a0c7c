"""The optional extras: which libraries each installs, and one clear error when one is missing.

`pip install feedback-streams` installs the core: feedback types, the Python handle
(StreamsClient, Workspace, give_feedback), the worker, the CLI's operator commands and the
schema tools. The rest is opt-in (pyproject.toml's optional-dependencies):

    serve     streams serve: REST, WebSocket and MCP over HTTP (FastAPI, uvicorn, MCP SDK)
    mcp       streams mcp: the MCP tools over stdio (MCP SDK, FastAPI)
    duckdb    the DuckDB score sink (streams sink duckdb; the demo's default sink)
    langfuse  the Langfuse score sink and experiment tracker (Langfuse SDK, httpx, orjson)
    judges    the LLM judges of streams.adapters.chat (httpx)
    demo      streams demo (serve, duckdb and httpx for its people)
    all       every extra above

A module that needs an extra imports its libraries under `needs(extra, feature)`: a missing
library then raises MissingExtra, whose one-line message names the extra to install, instead
of a ModuleNotFoundError deep in a traceback.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from contextlib import contextmanager

from streams.core.errors import MissingExtra

__all__ = ["EXTRAS", "needs", "require"]

EXTRAS: dict[str, tuple[str, ...]] = {
    "serve": ("fastapi", "uvicorn", "httptools", "websockets", "mcp"),
    "mcp": ("mcp", "fastapi"),
    "duckdb": ("duckdb",),
    "langfuse": ("langfuse", "httpx", "orjson"),
    "judges": ("httpx",),
    "demo": ("httpx", "duckdb", "fastapi", "uvicorn", "mcp"),
}
"""The modules each extra provides (import names, not distribution names); the tests check
that a missing one gives that extra's message."""


@contextmanager
def needs(extra: str, feature: str) -> Iterator[None]:
    """Import optional libraries in this block: any ImportError becomes MissingExtra naming
    `extra`, with `feature` (what needs it, e.g. "streams serve") first in the message.

    An inner MissingExtra is wrapped too, so the outermost feature names the extra to install
    (serve's app imports the MCP tools, which need the `mcp` extra's libraries, a subset of
    `serve`'s)."""
    if extra not in EXTRAS:
        raise ValueError(f"unknown extra {extra!r}; known: {', '.join(EXTRAS)}")
    try:
        yield
    except ImportError as exc:
        missing = exc.missing if isinstance(exc, MissingExtra) else exc.name
        # The library, not its submodule: `mcp`, not `mcp.server`.
        missing = missing.split(".")[0] if missing else None
        raise MissingExtra(extra, feature, missing) from exc


def require(extra: str, feature: str, *modules: str) -> None:
    """Import `modules` (default: all of the extra's), or raise MissingExtra naming `extra`:
    for a feature that checks its extra before doing any work (the demo)."""
    with needs(extra, feature):
        for module in modules or EXTRAS[extra]:
            importlib.import_module(module)

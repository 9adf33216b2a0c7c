"""`streams serve`: the REST service (WebSocket and MCP join it on the same app)."""

from __future__ import annotations

import json
import os
from typing import Annotated

import typer

from streams.surfaces.cli.base import TypesOption, load_types, settings

__all__ = ["serve"]


def serve(
    port: Annotated[int | None, typer.Option(
        help="Port. Default: $STREAMS_SERVE_PORT (8700).")] = None,
    types: TypesOption = None,
    print_openapi: Annotated[bool, typer.Option(
        "--print-openapi", help="Print the OpenAPI document and exit: of the project's "
        "shipped feedback types, or of the --types given.")] = False,
    loglevel: Annotated[str, typer.Option(help="uvicorn's log level.")] = "warning",
    workers: Annotated[int, typer.Option(
        help="Server processes sharing the port (each follows the keys and command ledgers "
        "itself, so idempotency and revocation hold across them).", min=1)] = 1,
) -> None:
    """Serve the REST API, the WebSocket stream and MCP on $STREAMS_SERVE_HOST (127.0.0.1)."""
    from streams.extras import needs
    from streams.runtime.root import Runtime

    # Lazy: FastAPI and uvicorn are loaded by `serve` only (the 'serve' extra).
    with needs("serve", "streams serve"):
        from streams.surfaces.http.app import create_app, openapi_document

    if print_openapi:
        # Without --types: the project's shipped types (the committed docs/openapi.json);
        # with them: what `streams serve --types ...` validates with, its whole registry.
        if types:
            from streams.core.feedback import registry

            load_types(types)
            document = openapi_document(list(registry))
        else:
            document = openapi_document()
        print(json.dumps(document, indent=2, sort_keys=True))
        return
    with needs("serve", "streams serve"):
        import uvicorn

    modules = load_types(types)
    config = settings()
    if workers == 1:
        uvicorn.run(create_app(Runtime(config)), host=config.serve_host,
                    port=port or config.serve_port, log_level=loglevel, access_log=False,
                    ws_per_message_deflate=config.stream_compression)
        return
    # Each worker process builds its app from the environment: hand it the types given here.
    os.environ["STREAMS_FEEDBACK_MODULES"] = ",".join(modules)
    uvicorn.run("streams.surfaces.http.app:app_from_env", factory=True, workers=workers,
                host=config.serve_host, port=port or config.serve_port, log_level=loglevel,
                access_log=False, ws_per_message_deflate=config.stream_compression)

"""`streams registry-proxy`: the schema registry closed per tenant (see
streams.surfaces.http.registry)."""

from __future__ import annotations

from typing import Annotated

import typer

from streams.core.errors import ConfigError
from streams.surfaces.cli.base import ExitCode, fail, settings

__all__ = ["registry_proxy"]


def registry_proxy(
    port: Annotated[int | None, typer.Option(
        help="Port. Default: $STREAMS_REGISTRY_PROXY_PORT (8781).")] = None,
    loglevel: Annotated[str, typer.Option(help="uvicorn's log level.")] = "warning",
) -> None:
    """Serve the registry (STREAMS_REGISTRY_UPSTREAM_URL, else SCHEMA_REGISTRY_URL) to tenants
    on $STREAMS_REGISTRY_PROXY_HOST (127.0.0.1), its API at the proxy's root:
    each request's Basic credentials are a broker user and password the broker must accept,
    and the user's topic ACLs decide which subjects it may read and register."""
    from streams.extras import needs
    from streams.runtime.root import Runtime

    config = settings().behind_registry_proxy()
    if not config.security_protocol.startswith("SASL_") or not config.sasl_username:
        raise fail(ConfigError(
            "the registry proxy checks credentials with the broker: give it a SASL listener "
            "and an operator's user (KAFKA_SECURITY_PROTOCOL=SASL_PLAINTEXT or SASL_SSL, "
            "KAFKA_SASL_MECHANISM, KAFKA_SASL_USERNAME and its password)"), ExitCode.USAGE)
    with needs("serve", "streams registry-proxy"):
        import uvicorn

        from streams.surfaces.http.registry import registry_proxy_app
    uvicorn.run(registry_proxy_app(Runtime(config)), host=config.registry_proxy_host,
                port=port or config.registry_proxy_port, log_level=loglevel, access_log=False)

"""The client's telemetry: its OpenTelemetry instruments (shared by the single and the
batch paths), and `configure_telemetry`, where an application's traces go.

`configure_telemetry` is the seed's entry point. An application (the process whose workflows
are judged) calls it once at start-up:

    telemetry = configure_telemetry("triage-app", tenant="acme", langfuse="traces")
    ...
    telemetry.shutdown()  # before exit: sends the spans still queued

- `langfuse="traces"`: the process's spans go to the tenant's Langfuse project over OTLP
  (`<host>/api/public/otel/v1/traces`), so the scores the pipeline mirrors there (on the run's
  trace id) sit beside the traces they judge; `telemetry.langfuse` is a client of the same
  project.
- `langfuse="scores"`: no spans to Langfuse; `telemetry.langfuse` only.
- `langfuse=None`: neither.

In every case the spans also go to `STREAMS_OTLP_TRACES_ENDPOINT` when it is set. The project
is the tenant's in `STREAMS_LANGFUSE_PROJECTS` (one Langfuse project per tenant, the same file
`streams sink langfuse` routes scores by), else LANGFUSE_PUBLIC_KEY/SECRET_KEY/HOST. A tenant
the file lacks gets nothing sent to any project: a warning says so and the counter
`streams.langfuse.skipped` (labels `tenant`, `signal`) counts it, through the application's
OpenTelemetry meter provider when it has one.

Why an OTLP exporter and not the Langfuse SDK's own span processor: one project per tenant
is chosen here from the settings, and the SDK's processor keeps to the spans of LLM
libraries it knows by default, while the spans that carry a run's trace id are the
application's own (`docs/traces.md`).
"""

from __future__ import annotations

import importlib.util
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from opentelemetry import metrics, trace

from streams.core.errors import ConfigError

if TYPE_CHECKING:
    from langfuse import Langfuse

    from streams.adapters.langfuse import LangfuseProject
    from streams.settings import Settings

__all__ = ["LangfuseUse", "Telemetry", "configure_telemetry", "feedback_counter",
           "langfuse_skipped", "tracer"]

log = logging.getLogger(__name__)

feedback_counter = metrics.get_meter("streams").create_counter(
    "streams.feedback", description="feedback given, by tenant, type and participant")
"""Feedback recorded, by tenant, workspace, type and participant."""

langfuse_skipped = metrics.get_meter("streams").create_counter(
    "streams.langfuse.skipped",
    description="configure_telemetry calls for a tenant without a Langfuse project")
"""configure_telemetry calls for a tenant the projects file lacks, by tenant and signal."""


def tracer() -> trace.Tracer:
    """The client's tracer, looked up per call so a provider configured after import is
    used."""
    return trace.get_tracer("streams")


LangfuseUse = Literal["traces", "scores"]
"""What an application uses Langfuse for: its traces (and scores beside them), or scores."""

_USES: tuple[str, ...] = ("traces", "scores")


@dataclass
class Telemetry:
    """What `configure_telemetry` set up: `langfuse` (a client of the project, or None),
    `destinations` (where spans go, for a start-up line), `provider` (the tracer provider it
    installed, or None)."""

    langfuse: Langfuse | None
    destinations: tuple[str, ...]
    provider: Any = None

    def flush(self) -> None:
        """Send the spans and Langfuse events still queued."""
        if self.provider is not None:
            self.provider.force_flush()
        if self.langfuse is not None:
            self.langfuse.flush()

    def shutdown(self) -> None:
        """Flush, then stop the exporters (call once, before the process exits)."""
        self.flush()
        if self.provider is not None:
            self.provider.shutdown()
        if self.langfuse is not None:
            self.langfuse.shutdown()


def configure_telemetry(service: str, *, tenant: str | None = None,
                        langfuse: LangfuseUse | None = None,
                        settings: Settings | None = None) -> Telemetry:
    """Install this process's tracer provider and Langfuse client (see the module docstring).

    `service` names the process (service.name). `tenant` picks its project from
    STREAMS_LANGFUSE_PROJECTS. ConfigError when `langfuse` is neither "traces", "scores" nor
    None, or when Langfuse is asked for without a tenant project file and without
    LANGFUSE_PUBLIC_KEY/SECRET_KEY. An application that installed its own tracer provider
    keeps it (nothing is exported from here then).
    """
    from streams.adapters.tracing import install_exporters, langfuse_exporter, otlp_exporter
    from streams.runtime.root import Runtime
    from streams.settings import Settings

    if langfuse is not None and langfuse not in _USES:
        raise ConfigError(f"configure_telemetry(langfuse={langfuse!r}): use \"traces\" (spans "
                          "and scores in Langfuse), \"scores\" (scores only) or None")
    if langfuse is not None and importlib.util.find_spec("langfuse") is None:
        raise ConfigError(f"configure_telemetry(langfuse={langfuse!r}) needs the Langfuse SDK: "
                          "pip install 'feedback-streams[langfuse]'")
    settings = settings if settings is not None else Settings.from_env()
    project = _project(settings, tenant, langfuse) if langfuse is not None else None
    exporters: list[Any] = []
    destinations: list[str] = []
    if settings.otlp_traces_endpoint:
        exporters.append(otlp_exporter(settings.otlp_traces_endpoint))
        destinations.append(settings.otlp_traces_endpoint)
    if project is not None and langfuse == "traces":
        host = project.host or settings.langfuse_host or _DEFAULT_HOST
        exporters.append(langfuse_exporter(host, project.public_key, project.secret_key))
        destinations.append(f"Langfuse at {host} (project of {project.public_key})")
    provider = install_exporters(service, exporters)
    if provider is None and exporters:
        log.warning("configure_telemetry(%r): a tracer provider is installed already; it is "
                    "kept, and nothing is sent to %s", service, ", ".join(destinations))
        for exporter in exporters:
            exporter.shutdown()
        destinations.clear()
    client = Runtime(settings).langfuse(project) if project is not None else None
    return Telemetry(langfuse=client, destinations=tuple(destinations), provider=provider)


_DEFAULT_HOST = "https://cloud.langfuse.com"  # the SDK's default base URL


def _project(settings: Settings, tenant: str | None, use: str) -> LangfuseProject | None:
    """The Langfuse project to use: the tenant's from the projects file, or the settings'
    keys; None (with a warning and a count) for a tenant the file lacks."""
    from streams.adapters.langfuse import LangfuseProject, read_projects

    if settings.langfuse_projects and tenant is not None:
        projects = read_projects(settings.langfuse_projects)
        if tenant not in projects:
            log.warning("tenant %r has no Langfuse project in STREAMS_LANGFUSE_PROJECTS (%s): "
                        "its %s are not sent to Langfuse", tenant, settings.langfuse_projects,
                        use)
            langfuse_skipped.add(1, {"tenant": tenant, "signal": use})
            return None
        return projects[tenant]
    if settings.langfuse_projects and tenant is None:
        raise ConfigError("configure_telemetry(tenant=None) with STREAMS_LANGFUSE_PROJECTS set: "
                          "name the tenant whose Langfuse project this process reports to")
    if not (settings.langfuse_public_key and settings.langfuse_secret_key):
        raise ConfigError(f"configure_telemetry(langfuse={use!r}) needs LANGFUSE_PUBLIC_KEY and "
                          "LANGFUSE_SECRET_KEY (or STREAMS_LANGFUSE_PROJECTS and a tenant)")
    return LangfuseProject(public_key=settings.langfuse_public_key,
                           secret_key=settings.langfuse_secret_key, host=settings.langfuse_host)

"""`streams schemas write | check | register`: the Avro schemas of the feedback types."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from streams.core.errors import (
    AccessDenied,
    KafkaUnavailable,
    SchemaError,
    StreamsError,
    ValidationFailed,
)
from streams.surfaces.cli.base import (
    ExitCode,
    RegistryUnreachable,
    console,
    fail,
    is_transport_error,
    settings,
)

__all__ = ["schemas_app"]

schemas_app = typer.Typer(no_args_is_help=True, help="Generate, check and register schemas.")

SCHEMA_DIR = Path("schemas")

SchemaTypesOption = Annotated[
    list[str] | None,
    typer.Option("--types", help="Module that defines your feedback types; repeatable. Only "
                 "their feedback_given records are handled. Default: the project's own "
                 "records and the feedback types it ships."),
]
SchemaDirOption = Annotated[
    Path, typer.Option("--dir", "--directory", help="Where the schema files live.")]


def _schemas_of(types: list[str] | None) -> dict[str, Any]:
    """The schemas `--types` names (default: the project's), or one error line."""
    from streams.adapters.avro.files import current_schemas

    try:
        return current_schemas(types or None)
    except StreamsError as exc:
        raise fail(exc, ExitCode.MODULE_FAILED if types else ExitCode.USAGE) from exc


@schemas_app.command("write")
def schemas_write(
    types: SchemaTypesOption = None,
    directory: SchemaDirOption = SCHEMA_DIR,
) -> None:
    """Write the current schemas as new versions where they changed; a version that breaks
    backward compatibility is refused."""
    from streams.adapters.avro.files import write_rule_schema, write_schemas

    schemas = _schemas_of(types)
    try:
        written = write_schemas(directory, schemas) + ([] if types else
                                                       write_rule_schema(directory))
    except StreamsError as exc:
        raise fail(exc, ExitCode.FAILED) from exc
    for path in written:
        console.print(f"wrote {path}")
    if not written:
        console.print(f"{directory}: every schema is up to date")


@schemas_app.command("check")
def schemas_check(
    types: SchemaTypesOption = None,
    directory: SchemaDirOption = SCHEMA_DIR,
) -> None:
    """Fail if a model drifted from its committed schema, or a version breaks compatibility."""
    from streams.adapters.avro.files import check_rule_schema, check_schemas

    problems = check_schemas(directory, _schemas_of(types)) + ([] if types else
                                                              check_rule_schema(directory))
    for problem in problems:
        console.print(f"[red]{escape(problem)}[/red]", soft_wrap=True)
    if problems:
        raise typer.Exit(ExitCode.FAILED)
    console.print("schemas match their models and are backward compatible")


@schemas_app.command("register")
def schemas_register(
    types: SchemaTypesOption = None,
    tenant: Annotated[str | None, typer.Option(
        help="Register under this tenant's subjects (`<prefix>.<tenant>.<record>`, as its "
        "records are written). Default: under the records' full names, shared by all.")] = None,
) -> None:
    """Register the schemas in the schema registry (SCHEMA_REGISTRY_URL), with BACKWARD
    compatibility."""
    # Lazy: the composition root loads the registry and Kafka clients.
    from streams.adapters.avro.fast import registry_refusal
    from streams.runtime.root import Runtime

    schemas = _schemas_of(types)
    config = settings()
    runtime = Runtime(config)
    try:
        # A quick probe first (no retries): a registry that is down fails in seconds.
        runtime.probe_registry().get_subjects()
        subjects = runtime.serde.register_schemas(schemas, tenant=tenant)
    except (SchemaError, ValidationFailed, AccessDenied) as exc:
        # The registry answered no: an incompatible or invalid schema, refused credentials.
        raise fail(exc, ExitCode.FAILED) from exc
    except KafkaUnavailable as exc:
        raise fail(RegistryUnreachable(
            f"the schema registry at {config.schema_registry_url} failed: {exc}")) from exc
    except Exception as exc:
        refused = registry_refusal(exc, "listing the subjects")
        if refused is not None:
            raise fail(refused, ExitCode.FAILED) from exc
        if not is_transport_error(exc):
            raise
        # The registry client's transport errors come through unwrapped: say where it
        # looked and what to do, not 300 lines of traceback.
        raise fail(RegistryUnreachable(
            f"cannot reach the schema registry at {config.schema_registry_url}: "
            f"{exc}")) from exc
    finally:
        runtime.close()
    print(json.dumps(subjects, indent=2))

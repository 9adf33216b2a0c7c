"""Committed schemas: `schemas/<record full name>/v<N>.avsc`, one file per version.

`write_schemas` adds a version when a model changed (and refuses one that could not read data
written with an earlier version); `check_schemas` fails when a model and its newest committed
schema differ (drift), and checks each version against every earlier one for backward
compatibility (a reader of the new version reads data of every older one).

By default the schemas are the project's: its fixed records and the feedback types it ships.
An application passes its own modules (`feedback_types(["my_app.feedback"])`,
`current_schemas(["my_app.feedback"])`, or `streams schemas ... --types my_app.feedback`) and
gets the `feedback_given` records of its own feedback types only.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from streams.adapters.avro.schemas import Schema, all_schemas, feedback_given_schema, fullname
from streams.core.errors import SchemaError, ValidationFailed
from streams.core.feedback import Feedback, registry

__all__ = [
    "PROJECT_FEEDBACK_MODULES", "canonical", "check_schemas", "compatibility_problems",
    "current_schemas", "feedback_types", "project_types", "versions", "write_schemas",
]

# The feedback types this project ships; their schemas are committed and checked.
PROJECT_FEEDBACK_MODULES = ("streams.examples.ops", "streams.core.judges",
                            "streams.core.proposals.outcome", "streams.core.pairwise")


def _defined_in(cls: type[Feedback], module: str) -> bool:
    return cls.__module__ == module or cls.__module__.startswith(module + ".")


def feedback_types(modules: Sequence[str]) -> list[type[Feedback]]:
    """The feedback types the modules (or their submodules) define; importing them registers
    them.

    Raises ValidationFailed when a module cannot be imported, or defines no feedback type:
    the message names the module and what to fix.
    """
    if not modules:
        raise ValidationFailed("name at least one module that defines feedback types")
    found: list[type[Feedback]] = []
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            raise ValidationFailed(
                f"cannot import feedback module {name!r}: {exc}; check the module name and "
                f"that its folder is on PYTHONPATH") from exc
        except Exception as exc:  # the user's module raised while defining its types
            raise ValidationFailed(
                f"importing feedback module {name!r} failed: {type(exc).__name__}: {exc}"
            ) from exc
        types = [cls for cls in registry if _defined_in(cls, name)]
        if not types:
            raise ValidationFailed(
                f"module {name!r} defines no feedback types: pass the module whose classes "
                f"subclass streams.Feedback (with targets=...)")
        found += [cls for cls in types if cls not in found]
    return found


def project_types() -> list[type[Feedback]]:
    """The shipped feedback types (importing their modules registers them)."""
    for module in PROJECT_FEEDBACK_MODULES:
        importlib.import_module(module)
    return [cls for cls in registry if cls.__module__ in PROJECT_FEEDBACK_MODULES]


def current_schemas(modules: Sequence[str] | None = None) -> dict[str, Schema]:
    """The schemas the code generates now, by full name.

    Without modules: the project's own (fixed records and shipped feedback types). With
    modules: the `feedback_given` records of the feedback types they define.
    """
    if modules is None:
        return all_schemas(project_types())
    return {fullname(schema): schema
            for schema in (feedback_given_schema(cls) for cls in feedback_types(modules))}


def canonical(schema: Any) -> str:
    """A stable text of a schema, for comparing."""
    return json.dumps(schema, sort_keys=True, separators=(",", ":"))


def versions(directory: Path, name: str) -> list[tuple[int, Path]]:
    """Committed versions of one record, oldest first."""
    folder = directory / name
    if not folder.is_dir():
        return []
    found = []
    for path in folder.glob("v*.avsc"):
        try:
            found.append((int(path.stem[1:]), path))
        except ValueError:
            continue
    return sorted(found)


def write_schemas(directory: Path, schemas: Mapping[str, Schema] | None = None) -> list[Path]:
    """Write a new version of every schema whose model changed; returns the files written.

    `schemas` defaults to the project's (`current_schemas()`). A new version that could not
    read data written with an earlier one is refused with SchemaError, and then nothing is
    written: a type whose change breaks compatibility needs a default for the new field, or a
    new name.
    """
    planned: list[tuple[Path, Schema]] = []
    problems: list[str] = []
    for name, schema in (current_schemas() if schemas is None else schemas).items():
        existing = versions(directory, name)
        if existing and canonical(json.loads(existing[-1][1].read_text())) == canonical(schema):
            continue
        number = existing[-1][0] + 1 if existing else 1
        path = directory / name / f"v{number}.avsc"
        problems += _refusals(path, number, schema, existing)
        planned.append((path, schema))
    if problems:
        raise SchemaError("refused, nothing written: " + "; ".join(problems))
    for path, schema in planned:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(schema, indent=2) + "\n")
    return [path for path, _schema in planned]


def _refusals(path: Path, number: int, schema: Schema,
              history: list[tuple[int, Path]]) -> list[str]:
    """Why a new version could not read data written with the earlier ones, if it could not."""
    from avro.schema import parse

    reader = parse(json.dumps(schema))
    return [f"{path}: v{number} {message}" for old_number, old_path in history
            for message in _incompatible(reader, parse(old_path.read_text()), old_number)]


def _incompatible(reader: Any, writer: Any, writer_number: int) -> list[str]:
    from avro.compatibility import ReaderWriterCompatibilityChecker, SchemaCompatibilityType

    checker = ReaderWriterCompatibilityChecker()  # type: ignore[no-untyped-call]
    result = checker.get_compatibility(reader, writer)
    if result.compatibility is SchemaCompatibilityType.compatible:
        return []
    return [f"cannot read data written with v{writer_number}: "
            f"{'; '.join(result.messages) or result.compatibility}"]


def check_schemas(directory: Path, schemas: Mapping[str, Schema] | None = None) -> list[str]:
    """Problems found: drift between models and files, and incompatible versions.

    `schemas` defaults to the project's (`current_schemas()`).
    """
    problems = []
    current = current_schemas() if schemas is None else schemas
    for name, schema in current.items():
        existing = versions(directory, name)
        if not existing:
            problems.append(f"{name}: no committed schema; run `streams schemas write`")
            continue
        if canonical(json.loads(existing[-1][1].read_text())) != canonical(schema):
            problems.append(
                f"{name}: the model differs from {existing[-1][1]}; run `streams schemas "
                f"write` and commit the new version")
    for folder in sorted(p for p in directory.iterdir() if p.is_dir()) if directory.is_dir() \
            else []:
        problems.extend(compatibility_problems(versions(directory, folder.name)))
    return problems


def compatibility_problems(history: list[tuple[int, Path]]) -> list[str]:
    """Each version must read data written with every earlier one (BACKWARD_TRANSITIVE)."""
    from avro.schema import parse

    problems = []
    parsed = [(n, p, parse(p.read_text())) for n, p in history]
    for i, (number, path, reader) in enumerate(parsed):
        for old_number, _old_path, writer in parsed[:i]:
            problems += [f"{path}: v{number} {message}"
                         for message in _incompatible(reader, writer, old_number)]
    return problems


RULE_SCHEMA_FILE = Path("rule") / "v1.schema.json"
"""Where the rules' JSON Schema is committed, under the schemas directory."""


def check_rule_schema(directory: Path) -> list[str]:
    """Problems with the committed JSON Schema of rules as data: missing, or not the code's
    (`streams.core.rules.RULE_SCHEMA`)."""
    from streams.core.rules import RULE_SCHEMA

    path = directory / RULE_SCHEMA_FILE
    if not path.is_file():
        return [f"{path}: the rules' JSON Schema is not committed; run `streams schemas write`"]
    if canonical(json.loads(path.read_text())) != canonical(RULE_SCHEMA):
        return [f"{path}: differs from streams.core.rules.RULE_SCHEMA; the JSON form of rules "
                f"changed: run `streams schemas write` and commit it (a change that refuses "
                f"rules already installed needs a v2 beside it)"]
    return []


def write_rule_schema(directory: Path) -> list[Path]:
    """Write the rules' JSON Schema when it differs from the committed file; the files
    written."""
    from streams.core.rules import RULE_SCHEMA

    if not check_rule_schema(directory):
        return []
    path = directory / RULE_SCHEMA_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(RULE_SCHEMA, indent=2) + "\n")
    return [path]

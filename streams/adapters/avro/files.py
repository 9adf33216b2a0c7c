"""Committed schemas: `schemas/<record full name>/v<N>.avsc`, one file per version.

`write_schemas` adds a version when a model changed; `check_schemas` fails when a model and
its newest committed schema differ (drift), and checks each version against every earlier one
for backward compatibility (a reader of the new version reads data of every older one).
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

from streams.adapters.avro.schemas import Schema, all_schemas
from streams.core.feedback import Feedback, registry

# The feedback types this project ships; their schemas are committed and checked.
PROJECT_FEEDBACK_MODULES = ("streams.examples.ops", "streams.core.judges")


def project_types() -> list[type[Feedback]]:
    """The shipped feedback types (importing their modules registers them)."""
    for module in PROJECT_FEEDBACK_MODULES:
        importlib.import_module(module)
    return [cls for cls in registry if cls.__module__ in PROJECT_FEEDBACK_MODULES]


def current_schemas() -> dict[str, Schema]:
    """The schemas the code generates now, by full name."""
    return all_schemas(project_types())


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


def write_schemas(directory: Path) -> list[Path]:
    """Write a new version of every schema whose model changed; returns the files written."""
    written = []
    for name, schema in current_schemas().items():
        existing = versions(directory, name)
        if existing and canonical(json.loads(existing[-1][1].read_text())) == canonical(schema):
            continue
        number = existing[-1][0] + 1 if existing else 1
        path = directory / name / f"v{number}.avsc"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(schema, indent=2) + "\n")
        written.append(path)
    return written


def check_schemas(directory: Path) -> list[str]:
    """Problems found: drift between models and files, and incompatible versions."""
    problems = []
    current = current_schemas()
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
    from avro.compatibility import ReaderWriterCompatibilityChecker, SchemaCompatibilityType
    from avro.schema import parse

    problems = []
    parsed = [(n, p, parse(p.read_text())) for n, p in history]
    checker = ReaderWriterCompatibilityChecker()  # type: ignore[no-untyped-call]
    for i, (number, path, reader) in enumerate(parsed):
        for old_number, _old_path, writer in parsed[:i]:
            result = checker.get_compatibility(reader, writer)
            if result.compatibility is not SchemaCompatibilityType.compatible:
                problems.append(
                    f"{path}: v{number} cannot read data written with v{old_number}: "
                    f"{'; '.join(result.messages) or result.compatibility}")
    return problems

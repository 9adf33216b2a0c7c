"""What the JSON forms of definitions (rules, queues) share: a JSON path's text, and the most
specific violation of a JSON Schema, said at its path."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

__all__ = ["json_path", "schema_problem"]


def json_path(parts: Collection[str | int]) -> str:
    """A JSON path's text: `$.when.where[1].op`."""
    text = "$"
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else f".{part}"
    return text


def schema_problem(schema: Mapping[str, Any], data: object) -> str | None:
    """The deepest, most specific violation of `schema` (draft 2020-12) by `data`, as
    'at $.x.y: message', or None when `data` is valid."""
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import best_match

    error = best_match(Draft202012Validator(schema).iter_errors(data))
    if error is None:
        return None
    return f"at {json_path(error.absolute_path)}: {error.message}"

"""What a Pydantic field's type is, in the terms both Avro and scores need.

One reading of a field's annotation serves the Avro schema generator and the score mapping,
so the two never disagree about what a field is.
"""

from __future__ import annotations

import enum
import re
import types
import typing
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Final, Literal

import annotated_types
from pydantic import BaseModel
from pydantic.fields import FieldInfo

__all__ = ["AVRO_NAME", "Shape", "ShapeKind", "UnsupportedType", "field_problems", "field_shape",
           "shape_of"]

AVRO_NAME: Final = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
"""What an Avro name (a record's field, an enum's symbol) must match."""

ShapeKind = Literal["bool", "int", "float", "str", "enum", "datetime", "list", "map", "model"]


@dataclass(frozen=True)
class Shape:
    """A field type: its kind, whether None is allowed, and the details of its kind.

    `symbols` are an enum's values, `minimum`/`maximum` a number's inclusive bounds (an
    exclusive bound is kept as exclusive in `exclusive`), `item` the element shape of a list or
    map, `model` a nested model's class, `enum_class` the Enum a value comes from.
    """

    kind: ShapeKind
    optional: bool = False
    symbols: tuple[str, ...] = ()
    minimum: float | None = None
    maximum: float | None = None
    exclusive: tuple[bool, bool] = (False, False)
    item: Shape | None = None
    model: type[BaseModel] | None = None
    enum_class: type[enum.Enum] | None = None


class UnsupportedType(TypeError):
    """A field's type has no mapping; the message names the type."""


def field_shape(info: FieldInfo) -> Shape:
    """The shape of a model field, including bounds given through Field(ge=..., le=...)."""
    return shape_of(info.annotation, list(info.metadata))


def shape_of(annotation: Any, metadata: list[Any] | None = None) -> Shape:
    """The shape of a type annotation; `metadata` carries annotated-types constraints."""
    metadata = list(metadata or [])
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        inner, *extra = list(typing.get_args(annotation))
        for item in extra:
            metadata.extend(item.metadata if isinstance(item, FieldInfo) else [item])
        return shape_of(inner, metadata)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) != 1:
            raise UnsupportedType(f"unions other than Optional[X] are not supported: {annotation}")
        inner_shape = shape_of(args[0], metadata)
        return replace(inner_shape, optional=True)
    if origin is Literal:
        values = typing.get_args(annotation)
        if not all(isinstance(v, str) for v in values):
            raise UnsupportedType(f"only Literal of strings is supported: {annotation}")
        return Shape(kind="enum", symbols=tuple(values))
    if origin in (list, tuple, set, frozenset) or annotation in (list, tuple, set):
        items = typing.get_args(annotation)
        return Shape(kind="list", item=shape_of(items[0]) if items else Shape(kind="str"))
    if origin is dict:
        key, value = typing.get_args(annotation) or (str, str)
        if key is not str:
            raise UnsupportedType(f"only dict[str, X] is supported: {annotation}")
        return Shape(kind="map", item=shape_of(value))
    if isinstance(annotation, type):
        if issubclass(annotation, bool):
            return Shape(kind="bool")
        if issubclass(annotation, enum.Enum):
            return Shape(
                kind="enum", symbols=tuple(str(m.value) for m in annotation),
                enum_class=annotation,
            )
        if issubclass(annotation, int):
            return _bounded("int", metadata)
        if issubclass(annotation, float):
            return _bounded("float", metadata)
        if issubclass(annotation, str):
            return Shape(kind="str")
        if issubclass(annotation, datetime):
            return Shape(kind="datetime")
        if issubclass(annotation, BaseModel):
            return Shape(kind="model", model=annotation)
    raise UnsupportedType(f"no mapping for type {annotation!r}")


def _bounded(kind: ShapeKind, metadata: list[Any]) -> Shape:
    low: float | None = None
    high: float | None = None
    low_ex = high_ex = False
    for item in metadata:
        if isinstance(item, annotated_types.Ge):
            low, low_ex = float(item.ge), False  # type: ignore[arg-type]
        elif isinstance(item, annotated_types.Gt):
            low, low_ex = float(item.gt), True  # type: ignore[arg-type]
        elif isinstance(item, annotated_types.Le):
            high, high_ex = float(item.le), False  # type: ignore[arg-type]
        elif isinstance(item, annotated_types.Lt):
            high, high_ex = float(item.lt), True  # type: ignore[arg-type]
    return Shape(kind=kind, minimum=low, maximum=high, exclusive=(low_ex, high_ex))


def field_problems(model: type[BaseModel]) -> list[str]:
    """What keeps a model's fields from having an Avro record and scores: each problem names
    its field (`a.b` for a nested model's) and says what to write instead; [] when none.

    Checked when a feedback type is defined, so a type that could never be written fails at
    its `class` statement, not at its first give_feedback.
    """
    problems: list[str] = []
    _check_model(model, "", problems, set())
    return problems


def _check_model(model: type[BaseModel], prefix: str, problems: list[str],
                 seen: set[type[BaseModel]]) -> None:
    if model in seen:
        return
    seen.add(model)
    for name, info in model.model_fields.items():
        where = f"{prefix}{name}"
        if not AVRO_NAME.match(name):
            problems.append(f"{where}: a field name must be letters, digits and _ (not "
                            f"starting with a digit)")
            continue
        try:
            shape = field_shape(info)
        except UnsupportedType as exc:
            problems.append(f"{where}: {exc}{_hint(info.annotation)}")
            continue
        _check_shape(shape, where, problems, seen)


def _check_shape(shape: Shape, where: str, problems: list[str],
                 seen: set[type[BaseModel]]) -> None:
    if shape.kind == "enum":
        bad = [s for s in shape.symbols if not AVRO_NAME.match(s)]
        if bad:
            problems.append(
                f"{where}: the values {bad} cannot be Avro enum symbols (letters, digits and _, "
                f"not starting with a digit); use a Literal of strings or a str Enum whose "
                f"values are names, e.g. Literal['p1', 'p2']")
    elif shape.item is not None:
        _check_shape(shape.item, where, problems, seen)
    elif shape.model is not None:
        _check_model(shape.model, f"{where}.", problems, seen)


def _hint(annotation: Any) -> str:
    if typing.get_origin(annotation) is Literal:
        return "; write the values as strings that are names, e.g. Literal['p1', 'p2']"
    return ""

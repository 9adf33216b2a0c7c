"""Typed feedback: Pydantic models registered by name, each declaring its targets.

    class TriageQuality(Feedback, name="triage_quality", targets={"run"}):
        correct: bool
        severity: Literal["low", "high", "critical"]
        note: str | None = None
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, ClassVar, Final

from pydantic import BaseModel, ConfigDict, ValidationError

from streams.core.errors import ValidationFailed
from streams.core.targets import TARGET_KINDS
from streams.core.typeinfo import field_problems

__all__ = [
    "LONG_MAX",
    "LONG_MIN",
    "Feedback",
    "FeedbackRegistry",
    "check_plain_value",
    "registry",
    "snake_case",
    "validate_feedback",
    "value_record",
]

# Feedback type names become Avro names and Langfuse score names, so they are kept to a
# charset both accept.
_NAME = re.compile(r"[a-z][a-z0-9_]{0,62}")


def snake_case(name: str) -> str:
    """`ShouldHaveFired` -> `should_have_fired`."""
    step = re.sub(r"(.)([A-Z][a-z]+)", r"\1_\2", name)
    return re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", step).lower()


class FeedbackRegistry:
    """Feedback types by registered name. One per process is usual: `registry`."""

    def __init__(self) -> None:
        self._types: dict[str, type[Feedback]] = {}

    def register(self, cls: type[Feedback]) -> None:
        """Add a type; a second type under a registered name is refused with TypeError."""
        name = cls.feedback_name
        existing = self._types.get(name)
        if existing is not None and existing is not cls:
            raise TypeError(
                f"feedback type name {name!r} is already registered by "
                f"{existing.__module__}.{existing.__qualname__}; pass another name= to "
                f"{cls.__qualname__}"
            )
        self._types[name] = cls

    def unregister(self, name: str) -> None:
        """Forget a type (tests define throwaway types)."""
        self._types.pop(name, None)

    def get(self, name: str) -> type[Feedback] | None:
        """The type registered under `name`, or None."""
        return self._types.get(name)

    def require(self, name: str) -> type[Feedback]:
        """The type registered under `name`, or ValidationFailed."""
        cls = self._types.get(name)
        if cls is None:
            raise ValidationFailed(
                f"unknown feedback type {name!r}; registered: {sorted(self._types)}"
            )
        return cls

    def names(self) -> list[str]:
        """Registered names, sorted."""
        return sorted(self._types)

    def __iter__(self) -> Iterator[type[Feedback]]:
        return iter([self._types[n] for n in sorted(self._types)])

    def __contains__(self, name: object) -> bool:
        return name in self._types

    def __len__(self) -> int:
        return len(self._types)

    def __bool__(self) -> bool:
        # An empty registry passed on purpose is still that registry: without this,
        # `types or registry` would swap it for the process-wide one.
        return True


registry = FeedbackRegistry()
"""The process-wide registry every Feedback subclass joins unless told otherwise."""


class Feedback(BaseModel):
    """Base of every feedback type.

    Class keywords: `name=` (default: the snake_case of the class name), `targets=` (a
    non-empty subset of {"run", "firing", "chain"}; required), `abstract=True` for an
    intermediate base that is not registered, `registry=` to join another registry.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    feedback_name: ClassVar[str] = ""
    feedback_targets: ClassVar[frozenset[str]] = frozenset()
    feedback_abstract: ClassVar[bool] = True
    _feedback_registry: ClassVar[FeedbackRegistry | None] = None

    def __init_subclass__(
        cls,
        *,
        name: str | None = None,
        targets: Iterable[str] | None = None,
        abstract: bool = False,
        registry: FeedbackRegistry | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init_subclass__(**kwargs)
        cls.feedback_abstract = abstract
        if targets is not None:
            found = frozenset(targets)
            unknown = found - TARGET_KINDS
            if isinstance(targets, str) or unknown:
                raise TypeError(
                    f"{cls.__qualname__}: targets must be a set drawn from "
                    f"{sorted(TARGET_KINDS)}, got {targets!r}"
                )
            cls.feedback_targets = found
        if abstract:
            return
        if not cls.feedback_targets:
            raise TypeError(
                f"{cls.__qualname__} declares no targets: pass targets= a set drawn from "
                f"{sorted(TARGET_KINDS)}, or abstract=True for an intermediate base"
            )
        cls.feedback_name = name if name is not None else snake_case(cls.__name__)
        if not _NAME.fullmatch(cls.feedback_name):
            raise TypeError(
                f"{cls.__qualname__}: feedback type name {cls.feedback_name!r} must match "
                f"{_NAME.pattern} (it names Avro records and scores)"
            )
        # Pydantic builds the fields after __init_subclass__: they are checked, and the type
        # registered, in __pydantic_init_subclass__.
        cls._feedback_registry = registry

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        """Once Pydantic has built the fields: refuse a type whose fields could never be
        written (no Avro mapping, enum values that are not Avro names), naming the field,
        then register it. A type that fails here is not registered."""
        super().__pydantic_init_subclass__(**kwargs)
        if cls.__dict__.get("feedback_abstract", True):
            return
        problems = field_problems(cls)
        if problems:
            raise TypeError(f"{cls.__qualname__} (feedback type {cls.feedback_name!r}) cannot "
                            f"be written: {'; '.join(problems)}")
        found = cls.__dict__.get("_feedback_registry")
        (found if found is not None else _default_registry()).register(cls)


def _default_registry() -> FeedbackRegistry:
    return registry


LONG_MIN: Final = -(2**63)
LONG_MAX: Final = 2**63 - 1
"""Avro's `long`: the range of every integer a feedback value may carry."""


def validate_feedback(
    value: Feedback | Mapping[str, Any], feedback_type: str | None = None,
    types: FeedbackRegistry | None = None,
) -> Feedback:
    """Turn a typed value, or a mapping plus its type's name, into a validated Feedback.

    An instance is validated again from its fields, so one built with `model_construct()`
    (which skips validation) cannot carry a value its type forbids. Every integer must fit
    Avro's long, every number must be finite and every text encodable as UTF-8. Raises
    ValidationFailed naming the field.
    """
    if isinstance(value, Feedback):
        cls: type[Feedback] = type(value)
        if cls.feedback_abstract:
            raise ValidationFailed(f"{cls.__qualname__} is abstract: give a concrete type")
        if feedback_type is not None and feedback_type != cls.feedback_name:
            raise ValidationFailed(
                f"feedback_type {feedback_type!r} does not match the value's type "
                f"{cls.feedback_name!r}: pass one or the other")
        fields = _fields_of(value)
    else:
        if feedback_type is None:
            raise ValidationFailed(
                "a mapping value needs its feedback_type (or pass a Feedback instance)")
        cls = (types or registry).require(feedback_type)
        if not isinstance(value, Mapping):
            raise ValidationFailed(
                f"a {feedback_type} value must be a mapping of field names to values or a "
                f"{cls.__qualname__} instance, not {type(value).__name__}")
        fields = dict(value)
    try:
        checked = cls.model_validate(fields)
    except ValidationError as exc:
        raise ValidationFailed(f"invalid {cls.feedback_name} value: {_problems(exc)}") from exc
    except (TypeError, ValueError) as exc:  # a validator of the type's own raised oddly
        raise ValidationFailed(f"invalid {cls.feedback_name} value: {exc}") from exc
    _check_numbers(checked.model_dump(), cls.feedback_name)
    return checked


def check_plain_value(cls: type[Feedback], value: Mapping[str, Any]) -> None:
    """Check a value already in plain form (as decoded from Avro) against its type: the type's
    own rules and the wire's (64-bit integers, finite numbers, valid text), without building
    and dumping an instance: the mirror's check of records other producers wrote."""
    try:
        # The model's validator itself, as `model_validate` calls it with its defaults:
        # 0.64 µs a value here against 1.10 µs through `model_validate`'s own wrapping.
        cls.__pydantic_validator__.validate_python(value)
    except ValidationError as exc:
        raise ValidationFailed(f"invalid {cls.feedback_name} value: {_problems(exc)}") from exc
    _check_numbers(value, cls.feedback_name)


def value_record(value: BaseModel) -> dict[str, Any]:
    """A feedback value as plain data: enums by value, nested models as dicts (what an event
    carries and Avro writes)."""
    return {k: _plain(v) for k, v in value.model_dump().items()}


_SCALARS = frozenset({str, int, float, bool, type(None)})


def _plain(value: Any) -> Any:
    if type(value) in _SCALARS:  # most fields: no isinstance check (an Enum's costs most)
        return value
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_plain(v) for v in value]
    return value


def _fields_of(value: BaseModel) -> dict[str, Any]:
    # model_construct() may leave fields unset or hold values its type forbids, at any depth;
    # read what each instance holds, so validation sees it (Pydantic does not validate a
    # nested model instance again by default).
    held = dict(value.__dict__)
    held.update(value.__pydantic_extra__ or {})
    return {k: _held(v) for k, v in held.items()}


def _held(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return _fields_of(value)
    if isinstance(value, list | tuple):
        return [_held(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _held(v) for k, v in value.items()}
    return value


def _problems(exc: ValidationError) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'value'}: {e['msg']}"
                     for e in exc.errors())


def _check_numbers(value: object, path: str) -> None:
    """Refuse integers outside Avro's long, numbers that are not finite and text that is not
    valid Unicode (lone surrogates: UTF-8 cannot encode them), by field path."""
    # The common case, a good value, is checked without building a path per field (the
    # mirror checks every record another producer wrote); the paths are built only to say
    # where a bad value is.
    if not _wire_ok(value):
        _refuse_numbers(value, path)


def _wire_ok(value: object) -> bool:
    """Whether `value` holds nothing `_refuse_numbers` refuses (the same rules, no paths)."""
    if type(value) is dict:
        # The usual value: a flat mapping of text keys to booleans, text and numbers, checked
        # in one loop (a call per field costs more than the checks themselves).
        for key, item in value.items():
            if (type(key) is not str or not key.isascii()) and not _wire_ok(key):
                return False
            kind = type(item)
            if kind is bool or item is None:
                continue
            if kind is str:
                if not item.isascii() and not _wire_ok(item):
                    return False
            elif kind is float:
                if not math.isfinite(item):
                    return False
            elif kind is int:
                if not LONG_MIN <= item <= LONG_MAX:
                    return False
            elif not _wire_ok(item):
                return False
        return True
    if isinstance(value, str):
        if value.isascii():
            return True
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return False
        return True
    if isinstance(value, bool):
        return True
    if isinstance(value, int):
        return LONG_MIN <= value <= LONG_MAX
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, Mapping):
        return all(_wire_ok(key) and _wire_ok(item) for key, item in value.items())
    if isinstance(value, list | tuple):
        return all(_wire_ok(item) for item in value)
    return True


def _refuse_numbers(value: object, path: str) -> None:
    if isinstance(value, bool):
        return
    if isinstance(value, int):
        if not LONG_MIN <= value <= LONG_MAX:
            raise ValidationFailed(
                f"{path}: {value} does not fit a 64-bit integer "
                f"(Avro long, {LONG_MIN}..{LONG_MAX})")
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise ValidationFailed(f"{path}: {value} is not a finite number")
    elif isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ValidationFailed(
                f"{path}: text with a lone surrogate at position {exc.start} is not valid "
                "Unicode (Avro strings are UTF-8)") from exc
    elif isinstance(value, Mapping):
        for key, item in value.items():
            _refuse_numbers(key, f"{path} key {key!r}")
            _refuse_numbers(item, f"{path}.{key}")
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            _refuse_numbers(item, f"{path}[{i}]")

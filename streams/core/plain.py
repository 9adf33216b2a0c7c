"""A decoded event in plain form: dicts, not pydantic objects, for the hot paths' matching.

A `PlainEvent` is what an adapter builds from a decoded record without pydantic (for Avro:
`streams.adapters.avro.codec.plain_from_record`): its `head` holds the envelope's fields and
its `payload` the event's fields laid out as the pydantic event has them, so a rule's paths
step through the same names (`F.data.service`, `F.value.correct`, `F.rule`). Predicates
evaluate on it where their answer is exact (streams.core.rules.predicates `Predicate.plain`)
and say "cannot tell" where it is not: a user's function, a path into a field whose pydantic
value is a model (a feedback target, an artifact change), the envelope's trace, seq or event.

`head`: `event_id`, `tenant`, `workspace`, `event_type`, `correlation_id`, `causation_id`,
`trace` (a dict or None); the actor's participant string (what `F.actor` reads) and the
time (an aware UTC datetime) are `participant()` and `time()`, which an adapter's subclass
may compute from its own head on first use (this class reads `head["actor"]` and
`head["time"]`). `payload`, by event type: an app event's `name` and
`data` (its `data_json` parsed); a run_succeeded's fields with `output` parsed from
`output_json`; a feedback_given's fields with its target as `{"kind", "id"}`; any other typed
event's fields, absent ones at their model defaults.
"""

from __future__ import annotations

import types
import typing
from dataclasses import dataclass
from typing import Any, Final

from pydantic import BaseModel

from streams.core.events import EVENT_TYPES, AppEvent, Event, Seq

__all__ = ["LAYOUTS", "TARGET_ID_FIELDS", "Layout", "PlainEvent", "layout_of"]

TARGET_ID_FIELDS: Final = {"run": "run_id", "firing": "firing_id", "chain": "correlation_id"}
"""A target's id field in its pydantic model, by kind (a plain target holds it as `id`)."""


def _holds_model(annotation: object) -> bool:
    """Whether a field's annotation can hold a pydantic model (Target, Change, ...)."""
    if isinstance(annotation, type):
        return issubclass(annotation, BaseModel)
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _holds_model(typing.get_args(annotation)[0])
    if origin is typing.Union or origin is types.UnionType:
        return any(_holds_model(a) for a in typing.get_args(annotation))
    return False


@dataclass(frozen=True, slots=True)
class Layout:
    """An event class's fields as a plain payload holds them."""

    cls: type[Event]
    fields: frozenset[str]
    required: frozenset[str]
    models: frozenset[str]
    """Fields whose pydantic value is a model: a path into them cannot be answered exactly
    from the plain dict (a feedback target is, for its kind and id field)."""

    def default(self, name: str) -> Any:
        """A missing optional field's value, as the model would give it (a fresh one)."""
        return self.cls.model_fields[name].get_default(call_default_factory=True)


def _layout(cls: type[Event]) -> Layout:
    fields = cls.model_fields
    return Layout(cls, frozenset(fields),
                  frozenset(n for n, f in fields.items() if f.is_required()),
                  frozenset(n for n, f in fields.items() if _holds_model(f.annotation)))


LAYOUTS: Final[dict[str, Layout]] = {name: _layout(cls) for name, cls in EVENT_TYPES.items()}
"""The layout of each typed event's payload, by event type."""

_APP_LAYOUT: Final = _layout(AppEvent)


def layout_of(event_type: str) -> Layout:
    """The payload layout of an event type (an app event's for a type not built in)."""
    return LAYOUTS.get(event_type, _APP_LAYOUT)


class PlainEvent:
    """One decoded event as plain dicts (see the module's docstring); read-only by contract."""

    __slots__ = ("app", "event_type", "head", "layout", "offset", "partition", "payload")

    def __init__(self, head: dict[str, Any], payload: dict[str, Any], *, partition: int = 0,
                 offset: int = 0) -> None:
        self.head = head
        self.payload = payload
        self.event_type: str = head["event_type"]
        self.layout = layout_of(self.event_type)
        self.app = self.event_type not in EVENT_TYPES
        self.partition = partition
        self.offset = offset

    def participant(self) -> str:
        """The actor's participant string (what `F.actor` reads)."""
        return str(self.head["actor"])

    def time(self) -> Any:
        """The event's time, as the envelope's `time` (an aware UTC datetime)."""
        return self.head["time"]

    @property
    def event_id(self) -> str:
        """The event's id."""
        return str(self.head["event_id"])

    @property
    def tenant(self) -> str:
        """The event's tenant."""
        return str(self.head["tenant"])

    @property
    def seq(self) -> Seq:
        """Where the record sits (as the envelope built from it has it)."""
        return Seq(partition=self.partition, offset=self.offset)

    def __repr__(self) -> str:
        return f"PlainEvent({self.head!r}, {self.payload!r})"

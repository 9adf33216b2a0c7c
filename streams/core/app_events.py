"""App event types: an application's own named events, declared so rules can name them.

    class ErrorSpike(AppEventType, name="ops:error_spike"):
        service: str
        errors: int = 1

    IncidentOpened = app_event_type("oncall:incident.opened")   # any data

A declaration registers its name in a process-wide registry (`app_event_types`), as a
Feedback class registers its type. On the wire an app event is still an `AppEvent` (its
`name`, and its `data` as a JSON object); the declaration's fields describe that data:
`ErrorSpike(service="api", errors=5).to_event()` builds the AppEvent, `ErrorSpike.of(app_event)`
reads one back. A rule may watch a built-in event type (`run_succeeded`, ...) or a declared
app event type; a name nothing declares is refused (see `RuleSet.check_event_types`), since
a rule watching it would silently never fire.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any, ClassVar, Final, Self

from pydantic import BaseModel, ConfigDict, ValidationError

from streams.core.errors import ValidationFailed
from streams.core.events import EVENT_TYPES, AppEvent

__all__ = [
    "APP_EVENT_NAME",
    "AppEventType",
    "AppEventTypes",
    "app_event_type",
    "app_event_types",
    "check_app_event_name",
    "known_event_types",
    "own_record",
]

APP_EVENT_NAME: Final = re.compile(r"^[a-z][a-z0-9_-]*:[a-z0-9][a-z0-9_.-]*$")
"""What an app event type's name must match: `namespace:name`, lower case, e.g.
`ops:error_spike` or `oncall:incident.opened`. The colon keeps app names apart from the
built-in types (`run_succeeded`, ...), which have none."""


OWN_PREFIX: Final = "streams:"
"""The namespace of the app events the pipeline writes itself (an evaluator's verdict
record, a throttle's record): reserved, and never matched by `on(AppEvent)`."""


def own_record(name: str) -> bool:
    """Whether an app event name is one of the pipeline's own records (`streams:...`): a rule
    watching every app event does not see them, so a rule cannot feed on its own throttles."""
    return name.startswith(OWN_PREFIX)


def check_app_event_name(name: object) -> str:
    """`name` if it is a valid app event type name; ValidationFailed saying the pattern if not."""
    if not isinstance(name, str) or not APP_EVENT_NAME.match(name):
        raise ValidationFailed(
            f"app event type name {name!r} must be namespaced, 'namespace:name', matching "
            f"{APP_EVENT_NAME.pattern} (lower case), e.g. 'ops:error_spike'"
        )
    return name


class AppEventTypes:
    """Declared app event types by name. One per process is usual: `app_event_types`."""

    def __init__(self) -> None:
        self._types: dict[str, type[AppEventType]] = {}

    def register(self, cls: type[AppEventType]) -> None:
        """Add a declaration; a second class under a declared name is refused."""
        name = check_app_event_name(cls.app_event_name)
        if own_record(name):
            raise ValidationFailed(
                f"app event type {name!r}: the {OWN_PREFIX!r} namespace is the pipeline's "
                "own (its verdict and throttle records); choose another namespace")
        existing = self._types.get(name)
        if existing is not None and existing is not cls:
            raise ValidationFailed(
                f"app event type {name!r} is already declared by "
                f"{existing.__module__}.{existing.__qualname__}; use that class, or give "
                f"{cls.__qualname__} another name="
            )
        self._types[name] = cls

    def unregister(self, name: str) -> None:
        """Forget a declaration (tests declare throwaway types)."""
        self._types.pop(name, None)

    def get(self, name: str) -> type[AppEventType] | None:
        """The declaration of `name`, or None."""
        return self._types.get(name)

    def names(self) -> list[str]:
        """Declared names, sorted."""
        return sorted(self._types)

    def __iter__(self) -> Iterator[type[AppEventType]]:
        return iter([self._types[n] for n in sorted(self._types)])

    def __contains__(self, name: object) -> bool:
        return name in self._types

    def __len__(self) -> int:
        return len(self._types)


app_event_types = AppEventTypes()
"""The process-wide registry every AppEventType subclass joins unless told otherwise."""


def known_event_types(types: AppEventTypes | None = None) -> list[str]:
    """Every event type name a rule may watch: the built-in types, then the declared app
    event types (of `types`, by default the process-wide registry)."""
    return [*sorted(EVENT_TYPES), *(types if types is not None else app_event_types).names()]


class AppEventType(BaseModel):
    """Base of app event type declarations; a subclass's fields are the event's data.

    Class keywords: `name=` (required, `namespace:name`), `registry=` to join another
    registry than `app_event_types`.
    """

    model_config = ConfigDict(frozen=True)

    app_event_name: ClassVar[str] = ""

    def __init_subclass__(
        cls, *, name: str | None = None, registry: AppEventTypes | None = None, **kwargs: Any
    ) -> None:
        super().__init_subclass__(**kwargs)
        if name is None:
            raise ValidationFailed(
                f"{cls.__qualname__}: an app event type needs its name, e.g. "
                f"class {cls.__name__}(AppEventType, name='ops:error_spike')"
            )
        cls.app_event_name = check_app_event_name(name)
        (registry if registry is not None else app_event_types).register(cls)

    def to_event(self) -> AppEvent:
        """This value as the AppEvent the log carries."""
        return AppEvent(name=self.app_event_name, data=self.model_dump(mode="json"))

    @classmethod
    def of(cls, event: AppEvent) -> Self:
        """The data of an AppEvent of this type, validated; ValidationFailed otherwise."""
        if event.name != cls.app_event_name:
            raise ValidationFailed(
                f"{cls.__qualname__} reads {cls.app_event_name!r} events, not {event.name!r}"
            )
        try:
            return cls.model_validate(event.data)
        except ValidationError as exc:
            raise ValidationFailed(f"invalid {cls.app_event_name} data: {exc}") from exc


def app_event_type(name: str, *, registry: AppEventTypes | None = None) -> type[AppEventType]:
    """Declare an app event type by name alone, with any data; the declared class.

    Declaring a name again returns the class already declared under it, so modules (an
    application's and its tests') can each declare the names they use.
    """
    types = registry if registry is not None else app_event_types
    existing = types.get(check_app_event_name(name))
    if existing is not None:
        return existing
    # Any data: the class declares no fields and keeps whatever the event carries.
    return type(f"AppEventType[{name}]", (AppEventType,), {
        "model_config": ConfigDict(frozen=True, extra="allow"),
        "__doc__": f"The app event type {name!r}, with any data.",
        "__module__": __name__,
    }, name=name, registry=types)

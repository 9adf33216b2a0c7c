"""Paths into an envelope (`F.value.correct`) and the predicates built from them.

Everything here is pure and reads only the envelope; a path that leads nowhere resolves to
`MISSING` and never matches, rather than raising.

Each predicate also answers on a decoded event's plain form (streams.core.plain), without
an Envelope: `Predicate.plain` gives True or False where that answer is exactly what `test`
would give on the event's envelope, and None ("cannot tell") otherwise: a function of the
envelope, a path into a field whose pydantic value is a model. The hot paths build the
envelope only for events some rule matches or may match.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from pydantic import BaseModel

from streams.core.events import FEEDBACK_GIVEN, Envelope
from streams.core.plain import TARGET_ID_FIELDS, PlainEvent
from streams.core.rules.checks import InvalidRule

__all__ = [
    "ENVELOPE_NAMES",
    "MISSING",
    "UNKNOWN",
    "AllOf",
    "AnyOf",
    "Check",
    "Compare",
    "F",
    "Not",
    "Path",
    "Predicate",
    "PredicateLike",
    "all_of",
    "any_of",
    "as_predicate",
    "not_",
]

ENVELOPE_NAMES: Final = frozenset({"workspace", "tenant", "actor", "event_type"})
"""Names that `where(name=...)` and `F.name` read from the envelope, not the payload."""

_OPS: Final = frozenset({"eq", "ne", "lt", "le", "gt", "ge", "isin", "contains", "exists"})


class _Missing:
    """What a path resolves to when the envelope has nothing there."""

    _instance: _Missing | None = None

    def __new__(cls) -> _Missing:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "<missing>"


MISSING: Final = _Missing()


class _Unknown:
    """What a path resolves to on a plain event when the plain form cannot say exactly."""

    _instance: _Unknown | None = None

    def __new__(cls) -> _Unknown:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "<unknown>"


UNKNOWN: Final = _Unknown()
"""`Path.resolve_plain`'s answer where only the envelope can tell (see the module)."""

# The envelope's fields a plain event's head holds as the envelope would give them.
_PLAIN_HEAD: Final = frozenset({"event_id", "tenant", "workspace", "event_type", "time",
                                "actor", "correlation_id", "causation_id"})


def _step(value: object, part: str | int) -> object:
    # Plain dicts (feedback values, app event data) are the common case: check them first.
    if type(value) is dict:
        return value.get(part, MISSING)
    if isinstance(value, BaseModel):
        if isinstance(part, str) and part in type(value).__pydantic_fields__:
            return getattr(value, part)
        return MISSING
    if isinstance(value, Mapping):
        return value.get(part, MISSING)
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        if isinstance(part, int):
            index = part
        else:
            index = int(part) if part.isascii() and part.isdigit() else -1
        return value[index] if 0 <= index < len(value) else MISSING
    return MISSING


class Path:
    """A place in an envelope, built from `F`: `F.value.correct`, `F.envelope.workspace`.

    Payload paths step through the payload's fields, then through dict keys (for
    `FeedbackGiven.value`, `AppEvent.data`, `RunSucceeded.output`) and list indexes. A name
    that clashes with a method here is reached by indexing: `F.data["contains"]`. Resolving a
    path that leads nowhere gives `MISSING`, never an error.
    """

    __slots__ = ("_parts", "_root")

    _root: str
    _parts: tuple[str | int, ...]

    def __init__(self, root: str, parts: tuple[str | int, ...] = ()) -> None:
        if root not in ("event", "envelope"):
            raise InvalidRule(f"a path starts at 'event' or 'envelope', not {root!r}")
        if root == "envelope" and parts and parts[0] not in Envelope.model_fields:
            raise InvalidRule(
                f"the envelope has no field {parts[0]!r}; it has {sorted(Envelope.model_fields)}"
            )
        object.__setattr__(self, "_root", root)
        object.__setattr__(self, "_parts", parts)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("a Path is immutable")

    def __getattr__(self, name: str) -> Path:
        if name.startswith("_"):
            raise AttributeError(name)
        return Path(self._root, (*self._parts, name))

    def __getitem__(self, key: str | int) -> Path:
        return Path(self._root, (*self._parts, key))

    def __eq__(self, other: object) -> bool:
        # Equality is identity of place, not a predicate: F.x == 1 must not look like a filter,
        # and where() refuses the bool it gives with a hint to write F.x.eq(1).
        if not isinstance(other, Path):
            return NotImplemented
        return (self._root, self._parts) == (other._root, other._parts)

    def __hash__(self) -> int:
        return hash((self._root, self._parts))

    def __reduce__(self) -> tuple[type[Path], tuple[str, tuple[str | int, ...]]]:
        return (Path, (self._root, self._parts))

    def __repr__(self) -> str:
        text = "F.envelope" if self._root == "envelope" else "F"
        for part in self._parts:
            text += f"[{part}]" if isinstance(part, int) else f".{part}"
        return text

    @property
    def on_envelope(self) -> bool:
        """Whether the path starts at the envelope rather than the payload."""
        return self._root == "envelope"

    @property
    def names(self) -> tuple[str | int, ...]:
        """The steps of the path after its root."""
        return self._parts

    def resolve(self, envelope: Envelope) -> object:
        """The value at this place, or `MISSING`. The envelope's actor is its participant."""
        parts = self._parts
        if self._root == "envelope":
            if not parts:
                return MISSING
            head = parts[0]
            value: object = (
                envelope.actor.participant if head == "actor" else getattr(envelope, str(head))
            )
            parts = parts[1:]
        else:
            value = envelope.event
        for part in parts:
            value = _step(value, part)
            if value is MISSING:
                break
        return value

    def resolve_plain(self, event: PlainEvent) -> object:
        """The value at this place in a plain event: what `resolve` gives on the event's
        envelope, or `UNKNOWN` where the plain form cannot say exactly (a model's field,
        the envelope's event or seq, a trace that is present)."""
        parts = self._parts
        if not parts:
            return MISSING if self._root == "envelope" else UNKNOWN
        head = parts[0]
        value: object
        if self._root == "envelope":
            if head == "actor":
                value = event.participant()
            elif head == "time":
                value = event.time()
            elif head in _PLAIN_HEAD:
                value = event.head.get(str(head))
            elif head == "trace" and event.head.get("trace") is None:
                value = None
            else:
                return UNKNOWN
        elif head not in event.layout.fields:
            return MISSING  # not a field of the event's model: resolve finds nothing either
        elif head in event.layout.models:
            if head != "target" or event.event_type != FEEDBACK_GIVEN or len(parts) < 2:
                return UNKNOWN
            # A target model's fields are its kind and the id field of that kind.
            target = event.payload["target"]
            step = parts[1]
            if step == "kind":
                value = target["kind"]
            elif step == TARGET_ID_FIELDS.get(target["kind"]):
                value = target["id"]
            else:
                return MISSING
            parts = parts[1:]
        else:
            value = event.payload[str(head)]
        for part in parts[1:]:
            value = _step(value, part)
            if value is MISSING:
                break
        return value

    def _compare(self, op: str, operand: object) -> Compare:
        if not self._parts:
            raise InvalidRule(f"{self!r} is a root, not a value: name a field, e.g. F.value.x")
        return Compare(self, op, operand)

    def eq(self, value: object) -> Predicate:
        """The value is present and equal (True is not 1: JSON booleans are not numbers)."""
        return self._compare("eq", value)

    def ne(self, value: object) -> Predicate:
        """The value is present and not equal; a missing value does not match."""
        return self._compare("ne", value)

    def lt(self, value: object) -> Predicate:
        """The value is present, comparable with `value`, and less."""
        return self._compare("lt", value)

    def le(self, value: object) -> Predicate:
        """The value is present, comparable with `value`, and less or equal."""
        return self._compare("le", value)

    def gt(self, value: object) -> Predicate:
        """The value is present, comparable with `value`, and greater."""
        return self._compare("gt", value)

    def ge(self, value: object) -> Predicate:
        """The value is present, comparable with `value`, and greater or equal."""
        return self._compare("ge", value)

    def isin(self, values: Iterable[object]) -> Predicate:
        """The value is present and equal to one of `values`."""
        if isinstance(values, str | bytes):
            raise InvalidRule(f"{self!r}.isin() takes a collection of values, not the string "
                              f"{values!r}; for a substring use contains()")
        return self._compare("isin", tuple(values))

    def contains(self, item: object) -> Predicate:
        """The value is a string holding `item`, a dict with key `item`, or a list with it."""
        return self._compare("contains", item)

    def exists(self) -> Predicate:
        """The path leads somewhere (a present None counts as present)."""
        return self._compare("exists", None)


class _FieldRoot:
    """The start of every path. `F.x` is the payload's `x`, except for `ENVELOPE_NAMES`."""

    __slots__ = ()

    def __getattr__(self, name: str) -> Path:
        if name.startswith("_"):
            raise AttributeError(name)
        if name in ("envelope", "event"):
            return Path(name)
        if name in ENVELOPE_NAMES:
            return Path("envelope", (name,))
        return Path("event", (name,))

    def __getitem__(self, name: str) -> Path:
        return Path("event", (name,))

    def __repr__(self) -> str:
        return "F"


F: Final = _FieldRoot()
"""Paths into an envelope: `F.value.correct`, `F.data.service`, `F.actor`, `F.envelope.time`.

`F.workspace`, `F.tenant`, `F.actor` (the participant string) and `F.event_type` are the
envelope's; `F.envelope.<field>` reaches any envelope field, `F.event.<field>` forces the
payload's field of that name.
"""


def _same(a: object, b: object) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    return a == b


def _ordered(op: str, a: object, b: object) -> bool:
    if isinstance(a, bool) != isinstance(b, bool):
        return False
    try:
        if op == "lt":
            return bool(a < b)  # type: ignore[operator]
        if op == "le":
            return bool(a <= b)  # type: ignore[operator]
        if op == "gt":
            return bool(a > b)  # type: ignore[operator]
        return bool(a >= b)  # type: ignore[operator]
    except TypeError:
        return False


def _contains(container: object, item: object) -> bool:
    if isinstance(container, str):
        return isinstance(item, str) and item in container
    if isinstance(container, Mapping):
        try:
            return item in container
        except TypeError:
            return False
    if isinstance(container, Sequence | set | frozenset) and not isinstance(container, bytes):
        return any(_same(x, item) for x in container)
    return False


class Predicate:
    """A test of an envelope. Combine with `&`, `|` and `~` (or all_of, any_of, not_)."""

    __slots__ = ()

    def test(self, envelope: Envelope) -> bool:
        """Whether the envelope passes."""
        raise NotImplementedError

    def plain(self, event: PlainEvent) -> bool | None:
        """Whether the envelope of a plain event passes, when the plain form can tell
        exactly; None when only `test` on the envelope can (the default)."""
        return None

    def paths(self) -> tuple[Path, ...]:
        """The paths the predicate reads (checked against the trigger's event class)."""
        return ()

    def __call__(self, envelope: Envelope) -> bool:
        return self.test(envelope)

    def __and__(self, other: Predicate) -> Predicate:
        return all_of(self, other)

    def __or__(self, other: Predicate) -> Predicate:
        return any_of(self, other)

    def __invert__(self) -> Predicate:
        return not_(self)


@dataclass(frozen=True, slots=True)
class Compare(Predicate):
    """`path op operand`; ops are eq, ne, lt, le, gt, ge, isin, contains and exists."""

    path: Path
    op: str
    operand: object

    def __post_init__(self) -> None:
        if self.op not in _OPS:
            raise InvalidRule(f"unknown comparison {self.op!r}; one of {sorted(_OPS)}")

    def test(self, envelope: Envelope) -> bool:
        return self.holds(self.path.resolve(envelope))

    def plain(self, event: PlainEvent) -> bool | None:
        value = self.path.resolve_plain(event)
        return None if value is UNKNOWN else self.holds(value)

    def holds(self, value: object) -> bool:
        """Whether a resolved value (or MISSING) passes the comparison."""
        if value is MISSING:
            return False
        if self.op == "exists":
            return True
        if self.op == "eq":
            return _same(value, self.operand)
        if self.op == "ne":
            return not _same(value, self.operand)
        if self.op == "isin":
            return any(_same(value, x) for x in self.operand)  # type: ignore[attr-defined]
        if self.op == "contains":
            return _contains(value, self.operand)
        return _ordered(self.op, value, self.operand)

    def paths(self) -> tuple[Path, ...]:
        return (self.path,)

    def __repr__(self) -> str:
        return f"{self.path!r}.{self.op}({'' if self.op == 'exists' else repr(self.operand)})"


@dataclass(frozen=True, slots=True)
class AllOf(Predicate):
    """Every part passes."""

    parts: tuple[Predicate, ...]

    def test(self, envelope: Envelope) -> bool:
        return all(p.test(envelope) for p in self.parts)

    def plain(self, event: PlainEvent) -> bool | None:
        # `test` stops at the first failing part, and a part that cannot tell might raise
        # there: a sure answer only when no unsure part comes first (under a Not, "False or
        # raises" is no sure False). A trigger's own conjunction may reject on a later
        # False (Trigger.matches_plain): raising is no match there too.
        unsure = False
        for part in self.parts:
            answer = part.plain(event)
            if answer is False:
                return None if unsure else False
            if answer is None:
                unsure = True
        return None if unsure else True

    def paths(self) -> tuple[Path, ...]:
        return tuple(path for p in self.parts for path in p.paths())


@dataclass(frozen=True, slots=True)
class AnyOf(Predicate):
    """At least one part passes."""

    parts: tuple[Predicate, ...]

    def test(self, envelope: Envelope) -> bool:
        return any(p.test(envelope) for p in self.parts)

    def plain(self, event: PlainEvent) -> bool | None:
        # `test` stops at the first passing part: a sure True is the answer only when no
        # part before it was unsure (it might have raised).
        unsure = False
        for part in self.parts:
            answer = part.plain(event)
            if answer is True:
                return None if unsure else True
            if answer is None:
                unsure = True
        return None if unsure else False

    def paths(self) -> tuple[Path, ...]:
        return tuple(path for p in self.parts for path in p.paths())


@dataclass(frozen=True, slots=True)
class Not(Predicate):
    """The part fails; so `~F.x.eq(1)` matches an envelope without `x`, and F.x.ne(1) not."""

    part: Predicate

    def test(self, envelope: Envelope) -> bool:
        return not self.part.test(envelope)

    def plain(self, event: PlainEvent) -> bool | None:
        answer = self.part.plain(event)
        return None if answer is None else not answer

    def paths(self) -> tuple[Path, ...]:
        return self.part.paths()


@dataclass(frozen=True, slots=True)
class Check(Predicate):
    """A plain function of the envelope used as a predicate."""

    fn: Callable[[Envelope], object]

    def test(self, envelope: Envelope) -> bool:
        return bool(self.fn(envelope))


PredicateLike = Predicate | Callable[[Envelope], object]
"""A predicate, or a plain function of the envelope used as one."""


def as_predicate(item: object, where: str) -> Predicate:
    """`item` as a Predicate (a function becomes a Check); InvalidRule naming `where` if it
    is neither."""
    if isinstance(item, Predicate):
        return item
    if isinstance(item, Path):
        raise InvalidRule(f"{where}: {item!r} is a path, not a test; write e.g. {item!r}.eq(...) "
                          f"or {item!r}.exists()")
    if callable(item):
        return Check(item)
    hint = " (did you write F.x == v? use F.x.eq(v))" if isinstance(item, bool) else ""
    raise InvalidRule(
        f"{where} takes predicates built from F, such as F.value.correct.eq(False), or functions "
        f"of the envelope; got {item!r} ({type(item).__name__}){hint}"
    )


def all_of(*predicates: PredicateLike) -> Predicate:
    """Passes when every predicate passes."""
    if not predicates:
        raise InvalidRule("all_of() needs at least one predicate")
    parts: list[Predicate] = []
    for p in predicates:
        pred = as_predicate(p, "all_of()")
        parts.extend(pred.parts if isinstance(pred, AllOf) else (pred,))
    return parts[0] if len(parts) == 1 else AllOf(tuple(parts))


def any_of(*predicates: PredicateLike) -> Predicate:
    """Passes when at least one predicate passes."""
    if not predicates:
        raise InvalidRule("any_of() needs at least one predicate")
    parts: list[Predicate] = []
    for p in predicates:
        pred = as_predicate(p, "any_of()")
        parts.extend(pred.parts if isinstance(pred, AnyOf) else (pred,))
    return parts[0] if len(parts) == 1 else AnyOf(tuple(parts))


def not_(predicate: PredicateLike) -> Predicate:
    """Passes when the predicate fails."""
    pred = as_predicate(predicate, "not_()")
    return pred.part if isinstance(pred, Not) else Not(pred)

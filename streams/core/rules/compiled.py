"""Triggers compiled for plain events: the same answers as `Trigger.matches_plain`, faster.

`compile_trigger(trigger, rule)` gives a function of a `PlainEvent` of the trigger's own
event type (the caller has looked the type up) that answers True, False or None ("cannot
tell"), exactly as `trigger.matches_plain(event, rule=rule)` does: each path is resolved with
the payload layout of the watched type known in advance (so a field the model lacks is a
constant MISSING and a model field a constant "cannot tell"), and the common comparisons (a
string's equality, a number's order, membership among strings) skip the general rules of
`Compare.holds` only where those rules give the same answer. A predicate it does not know
is asked through its own `plain`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from streams.core.events import FEEDBACK_GIVEN
from streams.core.ids import sample_point
from streams.core.plain import Layout, PlainEvent, layout_of
from streams.core.rules.predicates import (
    _PLAIN_HEAD,
    MISSING,
    UNKNOWN,
    AllOf,
    AnyOf,
    Check,
    Compare,
    Not,
    Path,
    Predicate,
    _step,
)
from streams.core.rules.triggers import Trigger, conjuncts

__all__ = ["PlainTest", "compile_path", "compile_trigger"]

PlainTest = Callable[[PlainEvent], bool | None]
"""A compiled test of a plain event: True, False, or None when only the envelope can tell."""

Getter = Callable[[PlainEvent], object]

_APP_LAYOUT: Final = layout_of("")


def _const(value: object) -> Getter:
    return lambda event: value


def _steps(first: Getter, rest: tuple[str | int, ...]) -> Getter:
    if not rest:
        return first
    if len(rest) == 1:
        part = rest[0]

        def one(event: PlainEvent) -> object:
            value = first(event)
            if type(value) is dict:
                return value.get(part, MISSING)
            return value if value is MISSING or value is UNKNOWN else _step(value, part)
        return one

    def many(event: PlainEvent) -> object:
        value = first(event)
        if value is UNKNOWN:
            return value
        for part in rest:
            value = _step(value, part)
            if value is MISSING:
                break
        return value
    return many


def compile_path(path: Path, layout: Layout) -> Getter:
    """`path.resolve_plain` for events of `layout`'s type."""
    parts = path.names
    if not parts:
        return _const(MISSING if path.on_envelope else UNKNOWN)
    head = parts[0]
    if path.on_envelope:
        if head == "actor":
            return _steps(lambda event: event.participant(), parts[1:])
        if head == "time":
            return _steps(lambda event: event.time(), parts[1:])
        if head in _PLAIN_HEAD:
            key = str(head)
            return _steps(lambda event: event.head.get(key), parts[1:])
        return path.resolve_plain  # the trace: known when absent
    if head not in layout.fields:
        return _const(MISSING)
    if head in layout.models:
        if head != "target" or layout.cls.event_type != FEEDBACK_GIVEN or len(parts) < 2:
            return _const(UNKNOWN)
        return path.resolve_plain
    field = str(head)
    return _steps(lambda event: event.payload[field], parts[1:])


def _compare(pred: Compare, layout: Layout) -> PlainTest:
    get = compile_path(pred.path, layout)
    holds = pred.holds
    op, operand = pred.op, pred.operand
    if op == "eq" and type(operand) is str:
        # A string equals only an equal string (no bool or MISSING does).
        def eq_str(event: PlainEvent) -> bool | None:
            value = get(event)
            return None if value is UNKNOWN else value == operand
        return eq_str
    if op in ("gt", "ge", "lt", "le") and type(operand) in (int, float):
        def order(event: PlainEvent) -> bool | None:
            value = get(event)
            if type(value) is int or type(value) is float:
                if op == "gt":
                    return bool(value > operand)  # type: ignore[operator]
                if op == "ge":
                    return bool(value >= operand)  # type: ignore[operator]
                if op == "lt":
                    return bool(value < operand)  # type: ignore[operator]
                return bool(value <= operand)  # type: ignore[operator]
            return None if value is UNKNOWN else holds(value)
        return order
    if op == "isin" and isinstance(operand, tuple) and all(type(x) is str for x in operand):
        among = frozenset(operand)

        def isin_str(event: PlainEvent) -> bool | None:
            value = get(event)
            if type(value) is str:
                return value in among
            return None if value is UNKNOWN else holds(value)
        return isin_str

    def general(event: PlainEvent) -> bool | None:
        value = get(event)
        return None if value is UNKNOWN else holds(value)
    return general


def _all(parts: list[PlainTest]) -> PlainTest:
    def all_of(event: PlainEvent) -> bool | None:
        unsure = False
        for part in parts:
            answer = part(event)
            if answer is False:
                return None if unsure else False
            if answer is None:
                unsure = True
        return None if unsure else True
    return all_of


def _any(parts: list[PlainTest]) -> PlainTest:
    def any_of(event: PlainEvent) -> bool | None:
        unsure = False
        for part in parts:
            answer = part(event)
            if answer is True:
                return None if unsure else True
            if answer is None:
                unsure = True
        return None if unsure else False
    return any_of


def compile_predicate(pred: Predicate, layout: Layout) -> PlainTest:
    """`pred.plain` for events of `layout`'s type."""
    if isinstance(pred, Compare):
        return _compare(pred, layout)
    if isinstance(pred, AllOf):
        return _all([compile_predicate(p, layout) for p in pred.parts])
    if isinstance(pred, AnyOf):
        return _any([compile_predicate(p, layout) for p in pred.parts])
    if isinstance(pred, Not):
        part = compile_predicate(pred.part, layout)

        def not_(event: PlainEvent) -> bool | None:
            answer = part(event)
            return None if answer is None else not answer
        return not_
    if isinstance(pred, Check):
        return lambda event: None
    return pred.plain


def compile_trigger(trigger: Trigger, rule: str) -> PlainTest:
    """`trigger.matches_plain(event, rule=rule)` for events of the type it watches (the
    caller checks the type; an `on(AppEvent)` trigger takes any app event)."""
    if trigger.completion is not None:
        # Its terminal events skip its filters and its chains are sampled by correlation id:
        # only the envelope tells (Trigger.matches_plain says the same).
        return lambda event: None
    name = trigger.event_type_name
    layout = _APP_LAYOUT if name is None else layout_of(name)
    # The trigger's conjunction, AllOf taken apart at the top: there a sure False after an
    # unsure part is still a no-match (raising is one too), as in Trigger.matches_plain.
    tests = [compile_predicate(p, layout) for p in conjuncts(trigger.predicates)]
    scope = [compile_path(source, layout) if isinstance(source, Path) else None
             for _name, source in (trigger.scope_by.parts if trigger.scope_by else ())]
    fraction = trigger.sample_fraction
    if len(tests) == 1 and not scope and fraction is None:
        return tests[0]

    def matches(event: PlainEvent) -> bool | None:
        unsure = False
        for test in tests:
            answer = test(event)
            if answer is False:
                return False
            if answer is None:
                unsure = True
        for get in scope:
            value = UNKNOWN if get is None else get(event)
            if value is UNKNOWN:
                unsure = True
            elif value is MISSING or value is None:
                return False
        if fraction is not None and sample_point(rule, event.head["event_id"]) >= fraction:
            return False
        return None if unsure else True
    return matches

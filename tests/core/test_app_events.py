"""App event types: declared by name, watched by rules; a rule naming no type is refused."""

from collections.abc import Iterator

import pytest

from streams.core.app_events import (
    AppEventType,
    AppEventTypes,
    app_event_type,
    app_event_types,
    known_event_types,
)
from streams.core.errors import ValidationFailed
from streams.core.events import EVENT_TYPES, AppEvent, Envelope, RunSucceeded
from streams.core.rules import F, Fire, InvalidRule, Rule, RuleEngine, RuleSet, on, run


@pytest.fixture
def opened() -> Iterator[type[AppEventType]]:
    """A declared type in the process-wide registry (the one a worker checks), then gone."""

    class Opened(AppEventType, name="t-app:incident.opened"):
        service: str
        errors: int = 1

    yield Opened
    app_event_types.unregister("t-app:incident.opened")


def spike(name: str, **data: object) -> Envelope:
    return Envelope.new(AppEvent(name=name, data=data), tenant="acme", workspace="prod")


@pytest.mark.parametrize("name", ["x", "run_succeded", "ns:", ":name", "Ops:Spike", "a b:c"])
def test_a_name_no_type_can_have_is_refused_at_definition(name: str) -> None:
    with pytest.raises(InvalidRule) as info:
        on(name)
    message = str(info.value)
    assert "namespace:name" in message
    assert "known event types" in message.lower()
    for builtin in EVENT_TYPES:
        assert repr(builtin) in message
    assert isinstance(info.value, ValidationFailed)


def test_an_undeclared_namespaced_name_is_refused_when_the_rules_are_loaded(
    opened: type[AppEventType],
) -> None:
    rules = RuleSet([Rule(name="r:typo", when=on("ns:run_succeeded"), then=run("a")),
                     Rule(name="r:ok", when=on(opened), then=run("a"))])
    with pytest.raises(InvalidRule) as info:
        rules.check_event_types()
    message = str(info.value)
    assert "'r:typo' watches 'ns:run_succeeded'" in message
    assert "r:ok" not in message
    assert "'t-app:incident.opened'" in message and "'run_succeeded'" in message
    assert "AppEventType" in message


def test_a_declared_app_event_type_is_accepted_and_matches(
    opened: type[AppEventType],
) -> None:
    by_class = Rule(name="r:by-class", when=on(opened).where(F.data.service.eq("api")),
                    then=run("a"))
    by_name = Rule(name="r:by-name", when=on("t-app:incident.opened"), then=run("a"))
    rules = RuleSet([by_class, by_name])
    rules.check_event_types()
    event = spike("t-app:incident.opened", service="api", errors=40)
    decisions = RuleEngine(rules).evaluate(event)
    assert [d.rule.name for d in decisions if isinstance(d, Fire)] == ["r:by-class", "r:by-name"]
    assert RuleEngine(rules).evaluate(spike("t-app:incident.closed", service="api")) == []
    other_service = RuleEngine(rules).evaluate(spike("t-app:incident.opened", service="db"))
    assert [d.rule.name for d in other_service] == ["r:by-name"]


def test_built_in_types_need_no_declaration() -> None:
    rules = RuleSet([Rule(name="r:by-name", when=on("run_succeeded"), then=run("a")),
                     Rule(name="r:by-class", when=on(RunSucceeded), then=run("a")),
                     Rule(name="r:any-app-event", when=on(AppEvent), then=run("a"))])
    rules.check_event_types(AppEventTypes())
    assert known_event_types(AppEventTypes()) == sorted(EVENT_TYPES)


def test_a_check_against_another_registry() -> None:
    types = AppEventTypes()
    rules = RuleSet([Rule(name="r", when=on("t-other:thing"), then=run("a"))])
    with pytest.raises(InvalidRule, match="'r' watches 't-other:thing'"):
        rules.check_event_types(types)
    app_event_type("t-other:thing", registry=types)
    rules.check_event_types(types)
    assert "t-other:thing" not in app_event_types


def test_a_declaration_carries_its_data(opened: type[AppEventType]) -> None:
    value = opened(service="api", errors=40)  # type: ignore[call-arg]
    event = value.to_event()
    assert event == AppEvent(name="t-app:incident.opened", data={"service": "api", "errors": 40})
    assert opened.of(event) == value
    with pytest.raises(ValidationFailed, match=r"reads 't-app:incident\.opened' events"):
        opened.of(AppEvent(name="t-app:other", data={"service": "api"}))
    with pytest.raises(ValidationFailed, match=r"invalid t-app:incident\.opened data"):
        opened.of(AppEvent(name="t-app:incident.opened", data={"errors": 3}))


def test_declaring_by_name_alone() -> None:
    types = AppEventTypes()
    declared = app_event_type("t-named:any", registry=types)
    assert app_event_type("t-named:any", registry=types) is declared
    assert types.names() == ["t-named:any"]
    event = AppEvent(name="t-named:any", data={"whatever": [1, 2]})
    assert declared.of(event).to_event() == event


def test_bad_declarations_are_refused(opened: type[AppEventType]) -> None:
    types = AppEventTypes()
    with pytest.raises(ValidationFailed, match="must be namespaced, 'namespace:name'"):
        app_event_type("spike", registry=types)
    with pytest.raises(ValidationFailed, match="needs its name"):
        class Nameless(AppEventType, registry=types):
            pass
    with pytest.raises(ValidationFailed, match="already declared by"):
        class Again(AppEventType, name="t-app:incident.opened"):
            pass
    assert app_event_types.get("t-app:incident.opened") is opened
    assert len(types) == 0


def test_the_shipped_example_rules_watch_declared_types() -> None:
    from streams.examples.ops_rules import RULES

    RuleSet(RULES).check_event_types()
    assert {"ops:error_spike", "oncall:incident.opened", "oncall:escalated"} <= set(
        app_event_types.names())

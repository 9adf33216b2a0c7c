"""give_feedback against the real broker, with generated values of a type at the edges of
every field kind: each call records the value (and the worker scores it as given) or refuses
it with ValidationFailed; nothing else. A few dozen examples; the broad search is pure
(tests/core/test_feedback_properties.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from streams.core.actors import UserActor
from streams.core.errors import ValidationFailed
from streams.core.events import AppEvent, RunStarted
from streams.core.feedback import LONG_MAX, LONG_MIN, validate_feedback
from streams.core.scores import score_configs, score_value
from streams.core.targets import RunTarget
from streams.core.tenancy import tenant_topics
from streams.settings import Settings
from tests.conftest import WorkerProcess, read_topic
from tests.core.test_feedback_properties import FieldSpec, bad_value, good_value
from tests.faults.conftest import assert_alive, check_scores
from tests.faults.fault_types import WORKER_TYPES, Edges

SPECS = {
    "flag": FieldSpec("bool"),
    "level": FieldSpec("literal", symbols=("low", "mid", "high")),
    "big": FieldSpec("int", lo=LONG_MIN, hi=LONG_MAX),
    "small": FieldSpec("int", lo=-3, hi=3),
    "ratio": FieldSpec("float", lo=0.0, hi=1.0, lo_excl=True),
    "anything": FieldSpec("float"),
    "note": FieldSpec("ostr"),
}


@st.composite
def edge_values(draw: st.DrawFn) -> tuple[dict[str, Any], bool]:
    # Half the values have one bad field, the others none.
    wrong = draw(st.none() | st.sampled_from(list(SPECS)))
    value = {name: draw(bad_value(spec) if name == wrong else good_value(spec))
             for name, spec in SPECS.items()}
    valid = all(SPECS[n].accepts(v) for n, v in value.items())
    return value, valid


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    made = asyncio.new_event_loop()
    yield made
    made.close()


def test_give_feedback_records_or_refuses_generated_values(
    loop: asyncio.AbstractEventLoop, settings: Settings, tenant_factory: Callable[..., str],
    client_factory: Callable[..., Any], worker_factory: Callable[..., WorkerProcess],
) -> None:
    tenant = tenant_factory()
    ws = client_factory().workspace(tenant, "prod", actor=UserActor(id="ada"))
    spike = loop.run_until_complete(ws.append(AppEvent(name="ops:error_spike")))
    loop.run_until_complete(ws.append(
        RunStarted(run_id="run_1", rule="r", action="triage", firing_id="f"),
        correlation_id=spike.id))
    recorded: dict[str, Edges] = {}
    refused = 0

    @hsettings(max_examples=40, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(edge_values())
    def give(case: tuple[dict[str, Any], bool]) -> None:
        nonlocal refused
        value, valid = case
        try:
            done = loop.run_until_complete(ws.give_feedback(
                value, feedback_type="fault_edges", on=RunTarget(run_id="run_1")))
        except ValidationFailed:
            assert not valid, f"refused a valid value: {value!r}"
            refused += 1
            return
        assert valid, f"recorded an invalid value: {value!r}"
        checked = validate_feedback(value, "fault_edges")
        assert isinstance(checked, Edges)
        recorded[done.id] = checked

    give()
    assert recorded, "no value was recorded: the generator is broken"
    configs = score_configs(Edges)
    expected = {fid: {c.name for c in configs if score_value(c, getattr(v, c.field)) is not None}
                for fid, v in recorded.items()}
    worker = worker_factory(types=WORKER_TYPES)
    scores = read_topic(settings, tenant_topics(tenant, settings.topic_prefix).scores,
                        at_least=sum(map(len, expected.values())), timeout=120)
    check_scores(scores, expected)
    for _msg, score in scores:
        value = recorded[score["source"]["feedback_event_id"]]
        config = next(c for c in configs if c.name == score["name"])
        want = score_value(config, getattr(value, config.field))
        got = score["numeric_value"] if score["numeric_value"] is not None \
            else score["string_value"]
        assert got == want, (score["name"], got, want)
    assert_alive(worker)
    print(f"give_feedback: {len(recorded)} recorded and scored as given, {refused} refused")

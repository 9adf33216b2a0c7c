"""Envelopes from their Avro dicts: the actors they share."""

from __future__ import annotations

import pytest

from streams.adapters.avro.codec import actor_from_record, envelope_from_record, envelope_to_record
from streams.core.actors import AgentActor, EvaluatorActor, SystemActor, UserActor
from streams.core.errors import ValidationFailed
from streams.core.events import AppEvent, Envelope


def _record(actor: object) -> dict[str, object]:
    envelope = Envelope.new(AppEvent(name="ops:deploy", data={}), tenant="acme",
                            workspace="prod", actor=actor)  # type: ignore[arg-type]
    return envelope_to_record(envelope)


def test_envelopes_of_one_actor_share_one_actor_object() -> None:
    first = envelope_from_record(_record(UserActor(id="ada")))
    second = envelope_from_record(_record(UserActor(id="ada")))
    assert first.actor is second.actor
    assert first.actor == UserActor(id="ada")
    assert envelope_from_record(_record(UserActor(id="bob"))).actor == UserActor(id="bob")


@pytest.mark.parametrize("actor", [
    UserActor(id="ada"), AgentActor(id="ops:triage"),
    EvaluatorActor(name="judge", version="2"), SystemActor()])
def test_every_kind_of_actor_comes_back_as_it_was_written(actor: object) -> None:
    assert envelope_from_record(_record(actor)).actor == actor


def test_an_evaluator_without_a_version_is_version_0() -> None:
    assert actor_from_record({"kind": "evaluator", "id": "judge", "version": None}) == \
        EvaluatorActor(name="judge", version="0")


@pytest.mark.parametrize("record", [
    {"kind": "user", "id": "", "version": None},
    {"kind": "user", "id": "a\x00b", "version": None},
    {"kind": "evaluator", "id": "a@b", "version": "1"},
    {"kind": "user", "id": ["not", "text"], "version": None},
])
def test_an_invalid_actor_is_refused_every_time(record: dict[str, object]) -> None:
    for _ in range(2):  # not remembered as valid after the first refusal
        with pytest.raises(ValidationFailed):
            actor_from_record(record)

import pytest

from streams.core.actors import (
    AgentActor,
    EvaluatorActor,
    SystemActor,
    UserActor,
    actor_from_participant,
)


@pytest.mark.parametrize(("actor", "participant"), [
    (UserActor(id="ada"), "user:ada"),
    (EvaluatorActor(name="triage-judge", version="2026-09-28"),
     "evaluator:triage-judge@2026-09-28"),
    (AgentActor(id="bot"), "agent:bot"),
    (SystemActor(), "system"),
])
def test_participants_round_trip(actor: object, participant: str) -> None:
    assert actor.participant == participant  # type: ignore[attr-defined]
    assert actor_from_participant(participant) == actor


def test_evaluator_versions_are_distinct_participants() -> None:
    old = EvaluatorActor(name="judge", version="1")
    new = EvaluatorActor(name="judge", version="2")
    assert old.participant != new.participant


def test_not_a_participant() -> None:
    with pytest.raises(ValueError, match="not a participant"):
        actor_from_participant("robot")

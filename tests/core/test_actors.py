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


def test_two_evaluators_never_share_a_participant() -> None:
    # name "j@1" version "2" and name "j" version "1@2" would both be evaluator:j@1@2.
    from streams.core.errors import ValidationFailed

    with pytest.raises(ValidationFailed, match="no '@'"):
        EvaluatorActor(name="j@1", version="2")
    with pytest.raises(ValidationFailed, match="version"):
        EvaluatorActor(name="j", version="1@2")


@pytest.mark.parametrize("bad", ["", "ada\n", "a\x00b", "\t"])
def test_ids_refuse_control_characters_and_emptiness(bad: str) -> None:
    from streams.core.errors import ValidationFailed

    for make in (lambda: UserActor(id=bad), lambda: AgentActor(id=bad),
                 lambda: EvaluatorActor(name=bad, version="1")):
        with pytest.raises(ValidationFailed):
            make()


def test_a_person_may_have_an_email_as_id() -> None:
    ada = UserActor(id="ada@example.com")
    assert actor_from_participant(ada.participant) == ada

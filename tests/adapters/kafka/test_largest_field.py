"""The field an oversized record is blamed on (streams.adapters.kafka.log.largest_field)."""

from streams.adapters.kafka.log import largest_field
from streams.core.actors import UserActor
from streams.core.events import AppEvent, Envelope, FeedbackGiven
from streams.core.targets import RunTarget


def test_feedback_names_the_value_field() -> None:
    envelope = Envelope.new(
        FeedbackGiven(feedback_type="triage_quality", target=RunTarget(run_id="r"),
                      value={"correct": True, "note": "x" * 5000}),
        tenant="acme", workspace="prod", actor=UserActor(id="ada"))
    name, size = largest_field(envelope)
    assert name == "value.note"
    assert size == 5002  # the JSON string, with its quotes


def test_other_events_name_their_own_field() -> None:
    envelope = Envelope.new(AppEvent(name="ops:spike", data={"blob": "y" * 300}),
                            tenant="acme", workspace="prod", actor=UserActor(id="app"))
    assert largest_field(envelope)[0] == "data"

"""The artifact, proposal and rule-install events: validation, and Avro round trips through
their committed schemas."""

import io
import json
from pathlib import Path

import fastavro
import pytest
from pydantic import ValidationError

from streams.adapters.avro.codec import envelope_from_record, envelope_to_record
from streams.adapters.avro.files import versions
from streams.adapters.avro.schemas import event_schemas, fullname
from streams.core.actors import AgentActor, UserActor
from streams.core.events import (
    EVENT_TYPES,
    ArtifactArchived,
    ArtifactCreated,
    ArtifactRevised,
    Change,
    Envelope,
    Event,
    ProposalMade,
    ProposalResolved,
    RuleArchived,
    RuleInstalled,
)

SCHEMAS = Path(__file__).resolve().parents[3] / "schemas"

EVENTS: list[Event] = [
    ArtifactCreated(artifact_id="a1", kind="rule", content={"name": "x", "body": "y"}),
    ArtifactRevised(artifact_id="a1", change=Change(set={"body": "z"}, unset=["name"])),
    ArtifactArchived(artifact_id="a1"),
    ProposalMade(proposal_id="p1", artifact_id="a1", kind="rule",
                 change=Change(set={"body": "z"}), run_id="run_1"),
    ProposalMade(proposal_id="p2", artifact_id="a1", kind="rule", action="archive"),
    ProposalResolved(proposal_id="p1", resolution="accepted",
                     changes=Change(set={"body": "w"})),
    ProposalResolved(proposal_id="p2", resolution="rejected"),
    RuleInstalled(rule="ops:x", artifact_id="a1"),
    RuleInstalled(rule="ops:x", definition='{"name": "ops:x"}', start_offsets={"0": 4, "1": 0}),
    RuleArchived(rule="ops:x"),
]


@pytest.mark.parametrize("event", EVENTS, ids=lambda e: type(e).__name__)
def test_roundtrip_through_the_committed_schema(event: Event) -> None:
    envelope = Envelope.new(event, tenant="acme", workspace="prod",
                            actor=AgentActor(id="rule:ops:x"))
    schema = event_schemas()[event.event_type]
    committed = versions(SCHEMAS, fullname(schema))
    assert committed, f"no committed schema for {fullname(schema)}"
    assert json.loads(committed[-1][1].read_text()) == schema
    parsed = fastavro.parse_schema(schema)
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, parsed, envelope_to_record(envelope))
    buffer.seek(0)
    record = fastavro.schemaless_reader(buffer, parsed)
    assert isinstance(record, dict)
    back = envelope_from_record(record)
    assert back == envelope
    assert EVENT_TYPES[event.event_type] is type(event)


def test_a_revise_proposal_needs_a_change_and_an_archive_takes_none() -> None:
    with pytest.raises(ValidationError, match="needs a change"):
        ProposalMade(proposal_id="p", artifact_id="a", kind="rule")
    with pytest.raises(ValidationError, match="takes no change"):
        ProposalMade(proposal_id="p", artifact_id="a", kind="rule", action="archive",
                     change=Change())


def test_a_rejection_takes_no_changes() -> None:
    with pytest.raises(ValidationError, match="rejection takes no changes"):
        ProposalResolved(proposal_id="p", resolution="rejected", changes=Change())


def test_an_envelope_data_reads_the_typed_fields() -> None:
    envelope = Envelope.new(EVENTS[3], tenant="acme", workspace="prod",
                            actor=UserActor(id="ada"))
    assert envelope.data["proposal_id"] == "p1"
    assert envelope.data["change"] == {"set": {"body": "z"}, "unset": []}

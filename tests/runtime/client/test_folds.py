"""The worker's per-workspace proposal folds over a tenant's events (a fake reader and codec
over encoded envelopes): each call reads only what was appended since the last one, builds
an envelope only for what a fold needs whole, passes other workspaces over undecoded, and
gives what the whole-log fold gives."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from streams.adapters.avro.codec import envelope_to_record
from streams.adapters.avro.fast import RegistryUnavailable
from streams.core.errors import SchemaError
from streams.core.events import Change, Envelope, FeedbackGiven, RunStarted
from streams.core.feedback import value_record
from streams.core.proposals import (
    EVALUATOR,
    PROPOSAL_OUTCOME,
    ProposalOutcome,
    fold_proposals,
)
from streams.core.targets import RunTarget
from streams.runtime.client.folds import ProposalLog
from tests.core.proposals.log import Log
from tests.runtime.client.folds_fakes import FakeCodec, FakeTopic


def folds_of(topic: FakeTopic, codec: FakeCodec) -> ProposalLog:
    return ProposalLog(topic.reader, codec)


def now() -> float:
    return time.monotonic()


def story() -> tuple[Log, Envelope, Envelope]:
    """An artifact, a run that proposes a change to it, and its acceptance."""
    log = Log()
    log.create("a1", {"when": "x"})
    started = log.run("chat:draft")
    proposal = log.propose("p1", "a1", Change(set={"when": "y"}), by=started)
    return log, started, log.resolve(proposal)


def test_each_call_reads_only_what_was_appended_since_the_last() -> None:
    log, started, resolved = story()
    topic, codec = FakeTopic(), FakeCodec()
    topic.append(codec, log.envelopes)
    folds = folds_of(topic, codec)
    first = folds.fold("prod", EVALUATOR, now())
    assert folds.read == len(log.envelopes)
    # Envelopes only for what the fold needs whole: not the cause or the rule_fired.
    assert folds.built == len(log.envelopes) - 2
    assert first.decide(resolved).score
    assert isinstance(started.event, RunStarted)
    given = log.append(FeedbackGiven(
        feedback_type=PROPOSAL_OUTCOME, target=RunTarget(run_id=started.event.run_id),
        value=value_record(ProposalOutcome(proposal_id="p1", outcome="accepted"))), EVALUATOR)
    topic.append(codec, [given])
    again = folds.fold("prod", EVALUATOR, now())
    assert again is first and folds.read == len(log.envelopes)  # the one new record
    assert not again.decide(resolved).score  # scored already: its own feedback is folded
    assert folds.fold("prod", EVALUATOR, float("-inf")) is first
    assert folds.read == len(log.envelopes)  # asked before the last read began: no read


def test_other_workspaces_are_passed_over_undecoded_and_folds_equal_the_whole_fold() -> None:
    log, _started, _resolved = story()
    others = [e.model_copy(update={"workspace": "staging", "event_id": f"st-{i}"})
              for i, e in enumerate(log.envelopes)]
    topic, codec = FakeTopic(), FakeCodec()
    topic.append(codec, [*log.envelopes, *others])
    folds = folds_of(topic, codec)
    prod = folds.fold("prod", EVALUATOR, now())
    assert codec.decoded == len(log.envelopes)  # staging's records not decoded
    whole = fold_proposals(log.envelopes)
    assert prod.ledger.outcome("p1") == whole.ledger.outcome("p1") == "accepted"
    assert prod.ledger.run_of("p1") == whole.ledger.run_of("p1") is not None
    assert [v.content for v in prod.ledger.artifacts["a1"].versions] == \
        [v.content for v in whole.ledger.artifacts["a1"].versions]


def test_a_fold_asked_for_later_reads_the_history_itself() -> None:
    log, started, resolved = story()
    # The same events in another workspace (the ids a worker derives stay as they are).
    others = [e.model_copy(update={"workspace": "staging"}) for e in log.envelopes]
    topic, codec = FakeTopic(), FakeCodec()
    topic.append(codec, [*log.envelopes, *others])
    folds = folds_of(topic, codec)
    folds.fold("prod", EVALUATOR, now())  # the shared reader passes staging over
    assert codec.decoded == len(log.envelopes)
    staging = folds.fold("staging", EVALUATOR, now())
    assert len(topic.readers) == 2 and topic.readers[1].closed  # its own, for the history
    whole = fold_proposals(others)
    assert staging.ledger.outcome("p1") == whole.ledger.outcome("p1")
    assert staging.ledger.run_of("p1") == whole.ledger.run_of("p1") is not None
    assert len(staging.ledger.artifacts["a1"].versions) == 2
    # Later staging records reach it through the shared reader, once each.
    more = log.propose("p2", "a1", Change(set={"when": "z"}), by=started)
    topic.append(codec, [more.model_copy(update={"workspace": "staging"})])
    again = folds.fold("staging", EVALUATOR, now())
    assert again is staging and set(staging.ledger.proposals) == {"p1", "p2"}
    assert folds.fold("prod", EVALUATOR, now()).decide(resolved).score


def test_a_registry_outage_reads_the_record_again_at_the_next_call() -> None:
    log, _started, resolved = story()
    topic, codec = FakeTopic(), FakeCodec()
    topic.append(codec, log.envelopes)
    codec.outage_at = {3}  # the run_started's writer cannot be fetched now
    folds = folds_of(topic, codec)
    with pytest.raises(RegistryUnavailable):
        folds.fold("prod", EVALUATOR, now())
    codec.outage_at = set()
    fold = folds.fold("prod", EVALUATOR, now())
    assert fold.ledger.run_of("p1") is not None  # nothing was lost
    assert fold.decide(resolved).score


def test_a_record_that_is_not_an_envelope_is_passed_over() -> None:
    log, _started, resolved = story()
    topic, codec = FakeTopic(), FakeCodec()
    topic.append(codec, log.envelopes[:2])
    topic.append_raw(codec, {"not": "an envelope"}, workspace=b"prod")
    topic.append(codec, log.envelopes[2:])
    fold = folds_of(topic, codec).fold("prod", EVALUATOR, now())
    assert fold.decide(resolved).score


def test_the_fakes_read_what_the_codec_wrote() -> None:
    # The fakes themselves: positions move on, rewind reads again, bytes decode back.
    log, _started, _resolved = story()
    topic, codec = FakeTopic(), FakeCodec()
    topic.append(codec, log.envelopes)
    reader = topic.reader()
    read: Iterator[Any] = reader.read_to_end()
    first = next(read)
    assert codec.decode(first.value())[1] == envelope_to_record(log.envelopes[0])
    assert len(list(read)) == len(log.envelopes) - 1 and list(reader.read_to_end()) == []
    reader.rewind(0, 2)
    assert len(list(reader.read_to_end())) == len(log.envelopes) - 2
    with pytest.raises(SchemaError):
        codec.decode(b"nope")


def test_the_runs_read_are_located_without_the_index() -> None:
    log, started, _resolved = story()
    topic, codec = FakeTopic(), FakeCodec()
    topic.append(codec, log.envelopes)
    folds = folds_of(topic, codec)
    assert isinstance(started.event, RunStarted)
    assert folds.locate_run(started.event.run_id, "prod") is None  # nothing read yet
    folds.fold("prod", EVALUATOR, now())
    found = folds.locate_run(started.event.run_id, "prod")
    assert found is not None
    assert (found.workspace, found.correlation_id, found.event_id, found.rule) == \
        ("prod", started.correlation_id, started.event_id, started.event.rule)
    assert folds.locate_run(started.event.run_id, "staging") is None
    assert folds.locate_run("run_unknown", "prod") is None


def test_records_without_headers_are_routed_by_their_own_workspace() -> None:
    log, started, resolved = story()
    others = [e.model_copy(update={"workspace": "staging"}) for e in log.envelopes]
    topic, codec = FakeTopic(), FakeCodec()
    topic.append(codec, [*others, *log.envelopes], headers=False)
    # A header that names a followed workspace does not place a record of another one.
    topic.append(codec, [log.envelopes[0].model_copy(update={"workspace": "staging",
                                                              "event_id": "e-lying"})],
                 headers=[("workspace", b"prod")])
    folds = folds_of(topic, codec)
    prod = folds.fold("prod", EVALUATOR, now())
    assert codec.decoded == 2 * len(log.envelopes) + 1  # no header to skip by
    assert prod.decide(resolved).score and prod.ledger.run_of("p1") is not None
    assert prod.folded == len(log.envelopes)  # staging's records were not folded here
    assert isinstance(started.event, RunStarted)
    assert folds.locate_run(started.event.run_id, "prod") is not None

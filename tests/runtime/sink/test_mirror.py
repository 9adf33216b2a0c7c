"""The in-process mirror's pure parts: where a follow starts, its cursor's group, what a
handle and a sink must be, and the workspace-restricted mirror step it reads through (no
broker: the registry is confluent-kafka's in-process double)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING
from confluent_kafka.schema_registry import SchemaRegistryClient

from streams import FeedbackMirror
from streams.adapters.avro.fast import FastCodec
from streams.adapters.avro.serde import AvroSerde
from streams.core.actors import UserActor
from streams.core.capabilities import Capability, builtin_grants
from streams.core.errors import Forbidden, ValidationFailed
from streams.core.events import AppEvent, Envelope, FeedbackGiven, Seq
from streams.core.feedback import Feedback, FeedbackRegistry, value_record
from streams.core.sinks.memory import InMemoryScoreSink
from streams.core.targets import RunTarget
from streams.runtime.client.workspace import Workspace
from streams.runtime.root import Runtime
from streams.runtime.sink.mirror import FollowStats, _WorkspaceRunner, mirror_group, start_offsets
from streams.runtime.sink.runner import cursor_group
from streams.runtime.worker.mirror import BAD_DATA, MirrorStep
from streams.settings import Settings

SETTINGS = Settings(topic_prefix="fs")
TOPIC = "fs.acme.events"
_registry = SchemaRegistryClient.new_client({"url": "mock://in-process-mirror"})
TYPES = FeedbackRegistry()


class Verdict(Feedback, name="mirror_verdict", targets={"run"}, registry=TYPES):
    ok: bool


def workspace(name: str = "prod", **handle: Any) -> Workspace:
    """A handle on a client double: the mirror reads only its settings, types, grants and runtime
    before it follows."""
    client = SimpleNamespace(settings=SETTINGS, types=TYPES, grants=builtin_grants(),
                             runtime=Runtime(SETTINGS))  # builds no client until asked
    return Workspace(client, "acme", name, UserActor(id="ada"), **handle)  # type: ignore[arg-type]


# -- where a follow starts -------------------------------------------------------------------


def test_no_after_seq_starts_from_the_cursor() -> None:
    assert start_offsets(None) is None


def test_after_seq_zero_starts_every_partition_at_its_beginning() -> None:
    assert start_offsets(0) == {}


def test_a_seq_starts_its_partition_after_it() -> None:
    assert start_offsets(Seq(partition=2, offset=41)) == {2: 42}


def test_seqs_start_each_partition_after_the_earliest_given_for_it() -> None:
    seqs = [Seq(partition=0, offset=9), Seq(partition=1, offset=3), Seq(partition=0, offset=4)]
    assert start_offsets(seqs) == {0: 5, 1: 4}
    assert start_offsets(iter(seqs)) == {0: 5, 1: 4}


@pytest.mark.parametrize("bad", [1, -1, True, "0:5", [Seq(partition=0, offset=1), 7],
                                 Seq(partition=0, offset=-1)])
def test_other_positions_are_refused_saying_what_to_give(bad: Any) -> None:
    with pytest.raises(ValidationFailed, match="after_seq"):
        start_offsets(bad)


# -- the cursor ------------------------------------------------------------------------------


def test_the_cursor_is_a_group_per_workspace_under_the_sink_cursors() -> None:
    group = mirror_group(SETTINGS, "acme", "prod", "warehouse")
    assert group == "fs.sink.warehouse.acme.prod"
    assert group.startswith(cursor_group(SETTINGS, "warehouse") + ".")
    # One name in two workspaces is two cursors; and no sink runner's cursor is one of them.
    assert mirror_group(SETTINGS, "acme", "staging", "warehouse") != group
    assert group != cursor_group(SETTINGS, "warehouse")


def test_a_bad_cursor_name_is_refused_when_the_mirror_is_made() -> None:
    with pytest.raises(ValidationFailed, match="invalid cursor name"):
        FeedbackMirror(workspace(), InMemoryScoreSink(), cursor="Warehouse!")


# -- the handle and the sink ------------------------------------------------------------------


def test_a_mirror_is_made_without_io_and_has_done_nothing() -> None:
    mirror = FeedbackMirror(workspace(), InMemoryScoreSink(), cursor=None)
    assert mirror.stats == FollowStats()
    mirror.stop()  # nothing follows: nothing to stop


def test_a_handle_that_may_not_read_is_forbidden() -> None:
    ws = workspace(capabilities=frozenset({Capability.GIVE_FEEDBACK}))
    with pytest.raises(Forbidden, match="mirroring the workspace's feedback needs 'read'"):
        FeedbackMirror(ws, InMemoryScoreSink(), cursor="dw")


def test_what_is_not_a_handle_or_not_a_sink_is_refused() -> None:
    with pytest.raises(ValidationFailed, match="follows a Workspace handle"):
        FeedbackMirror(SimpleNamespace(), InMemoryScoreSink(), cursor="dw")  # type: ignore[arg-type]
    with pytest.raises(ValidationFailed, match="not a ScoreSink"):
        FeedbackMirror(workspace(), object(), cursor="dw")  # type: ignore[arg-type]


def test_the_seeds_printing_sink_is_accepted() -> None:
    class PrintingSink:
        async def record(self, scores: Any, /) -> None:
            for score in scores:
                print(score.name, score.value, score.trace_id or score.session_id)

    FeedbackMirror(workspace(), PrintingSink(), cursor="warehouse")


# -- the records it reads ----------------------------------------------------------------------


class Message:
    """A consumed record, as confluent-kafka gives it."""

    def __init__(self, value: bytes | None, offset: int, event_type: bytes) -> None:
        self._value, self._offset, self._type = value, offset, event_type

    def topic(self) -> str:
        return TOPIC

    def partition(self) -> int:
        return 1

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes:
        return b"k"

    def value(self) -> bytes | None:
        return self._value

    def headers(self) -> list[tuple[str, bytes]]:
        return [("event_type", self._type)]

    def error(self) -> None:
        return None


def _encoded(envelope: Envelope) -> bytes:
    return AvroSerde(_registry, types=TYPES).encode_envelope(envelope, TOPIC)


def _feedback(workspace: str, ok: bool = True, feedback_type: str = "mirror_verdict",
              ) -> Envelope:
    event = FeedbackGiven(feedback_type=feedback_type, target=RunTarget(run_id="run_1"),
                          value=value_record(Verdict(ok=ok)))
    return Envelope.new(event, tenant="acme", workspace=workspace, actor=UserActor(id="ada"),
                        correlation_id="chain_1")


def test_the_step_restricted_to_a_workspace_passes_the_others_over_uncounted() -> None:
    step = MirrorStep(FastCodec(_registry), prefix="fs", types=TYPES, workspace="prod")
    mine, other = _feedback("prod"), _feedback("staging")
    assert step.score_records(TOPIC, 0, 5, _encoded(other), b"feedback_given") == []
    assert step.stats.feedback == 0
    [record] = step.score_records(TOPIC, 0, 6, _encoded(mine), b"feedback_given")
    assert record["name"] == "mirror_verdict.ok" and record["numeric_value"] == 1.0
    assert record["source"]["seq"] == "0:6" and record["source"]["workspace"] == "prod"
    assert step.stats.feedback == 1 and step.stats.scores == 1
    # The same mapping as the worker's: handle() encodes exactly these records.
    worker = MirrorStep(FastCodec(_registry), prefix="fs", types=TYPES)
    [out] = worker.handle(TOPIC, 0, 6, b"k", _encoded(mine), b"feedback_given")
    assert FastCodec(_registry).decode(out.value)[1] == record


def test_the_runner_reads_scores_of_its_workspace_and_raises_for_invalid_feedback() -> None:
    sink = InMemoryScoreSink()
    runner = _WorkspaceRunner(workspace(), sink, cursor="dw", starts={1: 8}, runtime=None,
                              codec=FastCodec(_registry))
    assert runner.subscription() == [TOPIC]
    assert runner.group == "fs.sink.dw.acme.prod"
    assert runner.replay  # a start was given: commits stay above the cursor
    assert runner.start_offset(TOPIC, 1) == 8
    assert runner.start_offset(TOPIC, 0) == OFFSET_BEGINNING
    mine = _feedback("prod", ok=False)
    [score] = runner.scores_of(Message(_encoded(mine), 3, b"feedback_given"),
                               _encoded(mine))
    assert score.value == 0.0 and score.source.feedback_event_id == mine.event_id
    assert score.session_id == "chain_1" and score.source.seq == "1:3"
    staging = _encoded(_feedback("staging"))
    assert runner.scores_of(Message(staging, 4, b"feedback_given"), staging) == []
    app = _encoded(Envelope.new(AppEvent(name="ops:x", data={}), tenant="acme",
                                workspace="prod"))
    assert runner.scores_of(Message(app, 5, b"ops:x"), app) == []
    unknown = _encoded(_feedback("prod", feedback_type="mirror_verdict"))
    TYPES.unregister("mirror_verdict")
    try:
        fresh = _WorkspaceRunner(workspace(), sink, cursor=None, starts=None, runtime=None,
                                 codec=FastCodec(_registry))
        assert fresh.scores_of(Message(unknown, 6, b"feedback_given"), unknown) == []
        assert fresh.step.stats.skipped_unknown_type == 1
    finally:
        TYPES.register(Verdict)
    with pytest.raises(BAD_DATA):  # the runner counts it as invalid (SinkRunner._decode)
        runner.scores_of(Message(b"not avro", 7, b"feedback_given"), b"not avro")
    # Nothing is dead-lettered by the in-process mirror: refusals are logged and counted.
    assert runner.refused(Message(b"x", 7, b"feedback_given"), "invalid feedback: x") is None

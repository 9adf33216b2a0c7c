"""The in-process mirror: one workspace's feedback, as scores, into any ScoreSink.

    mirror = FeedbackMirror(workspace, sink, cursor="warehouse")
    task = asyncio.create_task(mirror.follow())  # until cancelled (or mirror.stop())

A mirror follows one workspace (a `Workspace` handle: any actor's that may read will do, since
it only reads the log and saves its cursor), so run one task per workspace to mirror. It is
the sink runner (streams.runtime.sink.runner.SinkRunner: fetch, send, commit in order, outages
waited out) reading the workspace's tenant events topic instead of the scores topics, and the
worker's mirror step (streams.runtime.worker.mirror.MirrorStep, restricted to the workspace)
turning each feedback record into its scores: the same checks, the same score ids, the same
commit rule. There is no second implementation of either.

The cursor is a consumer group, `<prefix>.sink.<cursor>.<tenant>.<workspace>`
(`mirror_group`): two mirrors of a workspace with the same cursor share its partitions, and a
restarted one carries on from the offsets committed last. An offset is committed only after the
sink accepted the scores of every record below it, so mirroring is at least once: a mirror
stopped between recording and committing records those scores again, and the sink replaces
them (score ids derive from the feedback's envelope). Each mirror of a workspace, one per sink,
needs its own cursor name; a cursor remembers its sink and refuses another.

`cursor=None` keeps no cursor: it reads from the beginning (or from `after_seq`) every time and
commits nothing. `follow(after_seq=...)` replays from a position but never moves a committed
cursor backwards: it commits only offsets beyond the committed ones, so a restart during the
replay carries on from the cursor.

Feedback of a type this process does not register is skipped and counted. The mirror writes
nothing to the broker but its commits: invalid feedback (which the worker's mirror
dead-letters) and scores the sink refuses are logged and counted, and the cursor moves past
them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine, Iterable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Message

from streams.adapters.avro.codec import score_from_record
from streams.adapters.avro.fast import FastCodec
from streams.adapters.kafka.log import header_value
from streams.adapters.kafka.outputs import Output
from streams.core.capabilities import Capability
from streams.core.errors import ValidationFailed
from streams.core.events import Seq
from streams.core.scores import Score
from streams.core.sinks.base import ScoreSink
from streams.core.tenancy import tenant_topics, workspace_sink_group
from streams.runtime.client.workspace import Workspace
from streams.runtime.root import Runtime
from streams.runtime.sink.runner import SinkRunner
from streams.runtime.worker.mirror import MirrorStep
from streams.settings import Settings

__all__ = ["AfterSeq", "FeedbackMirror", "FollowStats", "mirror_group", "start_offsets"]

log = logging.getLogger(__name__)

AfterSeq = int | Seq | Iterable[Seq] | None
"""Where `follow` starts: None, from the cursor; 0, from the beginning; a Seq (a Recorded's
`seq`, say), after that record; Seqs, one per partition, after each."""


def mirror_group(settings: Settings, tenant: str, workspace: str, cursor: str) -> str:
    """The consumer group of an in-process mirror's cursor: the sink cursor's group
    (which checks the name) of this workspace, so one cursor name in two workspaces is two
    cursors (streams.core.tenancy.workspace_sink_group)."""
    return workspace_sink_group(cursor, tenant, workspace, settings.topic_prefix)


def start_offsets(after_seq: AfterSeq) -> dict[int, int] | None:
    """The first offset to read per events partition for `after_seq`; None to start from the
    cursor. A partition not named starts at its beginning: records of different partitions
    are not ordered, so a Seq says nothing about where the others stand, and reading them
    again repeats scores the sink replaces rather than skipping any."""
    if after_seq is None:
        return None
    if isinstance(after_seq, bool) or (isinstance(after_seq, int) and after_seq != 0):
        raise ValidationFailed(
            f"after_seq={after_seq!r}: give 0 (mirror everything again), a Seq (after that "
            "record, e.g. a Recorded's .seq) or Seqs (one per partition)")
    if isinstance(after_seq, int):
        return {}
    seqs = [after_seq] if isinstance(after_seq, Seq) else list(after_seq)
    starts: dict[int, int] = {}
    for seq in seqs:
        if not isinstance(seq, Seq) or seq.partition < 0 or seq.offset < 0:
            raise ValidationFailed(
                f"after_seq holds {seq!r}: each item must be a Seq(partition=..., offset=...) "
                "with a partition and offset of 0 or more")
        # Two for one partition: the earlier, which replays more instead of skipping.
        starts[seq.partition] = min(starts.get(seq.partition, seq.offset + 1), seq.offset + 1)
    return starts


@dataclass(frozen=True)
class FollowStats:
    """What a mirror's current (or last) follow has done.

    `records`: events-topic records handed on (the whole tenant's, in batches the sink took);
    `feedback`: this workspace's feedback records seen; `scores`: scores given to the sink;
    `skipped_unknown_type`: feedback of a type this process does not register; `invalid`:
    records that are not valid feedback (logged; the worker's mirror dead-letters them);
    `rejected`: scores the sink refused for good (logged); `commits`: cursor commits.
    """

    records: int = 0
    feedback: int = 0
    scores: int = 0
    skipped_unknown_type: int = 0
    invalid: int = 0
    rejected: int = 0
    commits: int = 0


class _WorkspaceRunner(SinkRunner):
    """A sink runner over one workspace's feedback: the tenant's events topic in, each record
    through the worker's mirror step, restricted to the workspace, and its scores to the sink."""

    undecodable_reason = "invalid feedback"

    def __init__(self, workspace: Workspace, sink: ScoreSink, *, cursor: str | None,
                 starts: dict[int, int] | None, runtime: Runtime | None,
                 batch_size: int | None = None, batch_wait: float | None = None,
                 codec: FastCodec | None = None) -> None:
        settings = workspace.client.settings
        super().__init__(
            runtime or workspace.client.runtime, sink, cursor=cursor, replay=starts is not None,
            batch_size=batch_size, batch_wait=batch_wait, codec=codec,
            group=mirror_group(settings, workspace.tenant, workspace.workspace, cursor)
            if cursor else None)
        self.workspace = workspace
        self.topic = tenant_topics(workspace.tenant, settings.topic_prefix).events
        self._starts = starts or {}
        self.name = self.label = f"{workspace.tenant}/{workspace.workspace}:{cursor or '-'}"

    @cached_property
    def step(self) -> MirrorStep:
        """The worker's mirror step, on this runner's codec, for this workspace only."""
        return MirrorStep(self.codec, prefix=self.settings.topic_prefix,
                          types=self.workspace.client.types, workspace=self.workspace.workspace)

    def subscription(self) -> list[str]:
        """The workspace's tenant events topic."""
        return [self.topic]

    def start_offset(self, topic: str, partition: int) -> int:
        """Where `after_seq` starts the partition (its beginning when it names none)."""
        return self._starts.get(partition, OFFSET_BEGINNING)

    def scores_of(self, msg: Message, value: bytes) -> list[Score]:
        """The scores of an events record: [] for what is not this workspace's feedback of a
        registered type; raises (BAD_DATA) for invalid feedback."""
        event_type = header_value(msg.headers(), "event_type")
        records = self.step.score_records(msg.topic() or "", msg.partition() or 0,
                                          msg.offset() or 0, value, event_type)
        return [score_from_record(record) for record in records]

    def refused(self, msg: Message, reason: str) -> Output | None:
        """Logged and counted, not dead-lettered: the worker's mirror dead-letters invalid
        feedback (a second letter would be redriven twice), and the sink's refusals are this
        process's to see; the cursor moves past them."""
        log.warning("%s: %s[%s]@%s not mirrored: %s", self.label, msg.topic(), msg.partition(),
                    msg.offset(), reason)
        return None


class FeedbackMirror:
    """Follows one workspace's log and records each feedback's scores in a ScoreSink,
    attached to the trace (or, without one, the session) the feedback is about.

    `cursor` names the mirror's cursor (a consumer group, see `mirror_group`; None keeps
    none). `runtime` gives the process's clients (streams.runtime.root.Runtime); without one,
    the mirror uses the workspace handle's (its StreamsClient's runtime).
    `batch_size` and `batch_wait` default to STREAMS_SINK_BATCH_SIZE and
    STREAMS_SINK_BATCH_WAIT. Constructing one does no I/O; a handle whose actor may not read
    the workspace is Forbidden here.
    """

    def __init__(self, workspace: Workspace, sink: ScoreSink, *, cursor: str | None,
                 runtime: Runtime | None = None, batch_size: int | None = None,
                 batch_wait: float | None = None) -> None:
        if not isinstance(workspace, Workspace):
            raise ValidationFailed(
                f"FeedbackMirror follows a Workspace handle, not {type(workspace).__name__}: "
                "pass `await client.open(tenant, workspace, actor=...)`")
        if not callable(getattr(sink, "record", None)):
            raise ValidationFailed(
                f"{type(sink).__name__} is not a ScoreSink: it needs "
                "`async def record(self, scores, /)` (see streams.core.sinks.base)")
        workspace.client.grants.check(workspace.actor, Capability.READ,
                                      doing="mirroring the workspace's feedback",
                                      narrowed=workspace.capabilities)
        if cursor is not None:
            mirror_group(workspace.client.settings, workspace.tenant, workspace.workspace,
                         cursor)  # a bad name fails here, not when the follow starts
        self.workspace = workspace
        self.sink = sink
        self.cursor = cursor
        self.runtime = runtime
        self.batch_size = batch_size
        self.batch_wait = batch_wait
        self._runner: _WorkspaceRunner | None = None
        self._started = False

    def follow(self, after_seq: AfterSeq = None) -> Coroutine[Any, Any, FollowStats]:
        """Mirror until cancelled or stopped (`stop`); await it, or run it as a task.

        `after_seq` (see `AfterSeq`) replays from a position: `0` mirrors everything again,
        a Seq what comes after it; the committed cursor stays where it is until the replay
        passes it. Without it the mirror carries on from its cursor.

        Cancelling the task, or `stop()`, finishes the batch the sink is recording, commits
        what it accepted and flushes the sink (if it has a flush). Returns the stats. Raises
        NotFound for a tenant the broker does not know, ValidationFailed for a cursor another
        sink owns or a second follow of this mirror while one runs, OutageTooLong after a
        broker or registry outage longer than STREAMS_OUTAGE_LIMIT.
        """
        if self._runner is not None and self._started:
            raise ValidationFailed(
                "this mirror is following already: stop it first, or make another "
                "FeedbackMirror (with its own cursor, or the same one to share the work)")
        # Made now, not when the coroutine starts, so a stop() right after this call holds.
        runner = self._runner = _WorkspaceRunner(
            self.workspace, self.sink, cursor=self.cursor, starts=start_offsets(after_seq),
            runtime=self.runtime, batch_size=self.batch_size, batch_wait=self.batch_wait)
        return self._follow(runner)

    async def _follow(self, runner: _WorkspaceRunner) -> FollowStats:
        if runner is not self._runner:
            raise ValidationFailed("a later follow() of this mirror replaced this one")
        self._started = True
        try:
            await self.workspace.client.log.require_tenant(self.workspace.tenant)
            running = asyncio.ensure_future(runner.run())
            try:
                await asyncio.shield(running)
            except asyncio.CancelledError:
                # Cancelled from outside: end like stop(), committing what the sink accepted;
                # a second cancel cancels the runner itself.
                runner.stop()
                try:
                    await running
                except Exception:
                    log.exception("%s: the mirror failed while stopping", runner.label)
                raise
            return self.stats
        finally:
            self._started = False

    def stop(self) -> None:
        """End the follow in progress (or the one `follow()` just made): it finishes the
        batch at the sink, commits, flushes the sink and returns."""
        if self._runner is not None:
            self._runner.stop()

    @property
    def stats(self) -> FollowStats:
        """What the current (or last) follow has done."""
        runner = self._runner
        if runner is None or "step" not in vars(runner):  # made, not started: nothing done
            return FollowStats()
        sent, seen = runner.stats, runner.step.stats
        return FollowStats(records=sent.records, feedback=seen.feedback, scores=sent.scores,
                           skipped_unknown_type=seen.skipped_unknown_type,
                           invalid=sent.undecodable, rejected=sent.rejected,
                           commits=sent.commits)

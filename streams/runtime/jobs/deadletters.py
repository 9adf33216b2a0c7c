"""Reading a tenant's dead letters and re-driving the chosen ones (see
streams.core.deadletters for what a re-drive does and why it is idempotent).

`read_letters` reads the dead-letter topic from its beginning to its end at the time of the
call (a group-less reader: it commits nothing); `read_redriven` reads the markers of earlier
re-drives; `execute` re-drives a plan's letters in chunks: the chunk's records are delivered
first, then its markers, so a marker never names records that did not land.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from confluent_kafka import KafkaException, TopicPartition

from streams.adapters.kafka.log import Headers, header_value, reached_end, take, watermarks
from streams.adapters.kafka.outputs import Output
from streams.core.deadletters import (
    DeadLetter,
    Redrive,
    RedriveMarker,
    RedrivePlan,
    describe,
)
from streams.core.errors import KafkaUnavailable, NotFound, SchemaError, StreamsError
from streams.core.feedback import FeedbackRegistry, registry
from streams.core.tenancy import (
    DEADLETTER,
    check_tenant,
    reader_group,
    redriven_topic,
    tenant_topics,
    topic_kind,
)
from streams.runtime.root import Runtime
from streams.runtime.worker.mirror import MirrorStep

__all__ = ["Progress", "RedriveResult", "execute", "read_letters", "read_redriven",
           "require_tenant"]

Progress = Callable[[int, int], None]
"""Called with (done, total) as work advances."""

_CHUNK = 500


def require_tenant(runtime: Runtime, tenant: str) -> str:
    """The tenant's dead-letter topic; ValidationFailed for a bad name, NotFound for a tenant
    the broker does not have."""
    check_tenant(tenant)
    if tenant not in runtime.admin.tenants():
        raise NotFound(f"no tenant {tenant!r} under prefix {runtime.settings.topic_prefix!r} "
                       "(`streams tenant list` shows the tenants; check "
                       "STREAMS_TOPIC_PREFIX)")
    return tenant_topics(tenant, runtime.settings.topic_prefix).deadletter


def _read(runtime: Runtime, topic: str, kind: str, progress: Progress | None = None,
          ) -> list[tuple[int, int, bytes | None, bytes | None, Any]]:
    """(partition, offset, key, value, headers) of every record of `topic` now."""
    settings = runtime.settings
    consumer = runtime.reader(reader_group(topic, kind, settings.topic_prefix))
    out: list[tuple[int, int, bytes | None, bytes | None, Any]] = []
    try:
        marks = watermarks(consumer, topic, timeout=settings.admin_timeout, settings=settings)
        todo = {p: high for p, (low, high) in marks.items() if high > low}
        total = sum(high - low for low, high in marks.values())
        if progress is not None:
            progress(0, total)
        if todo:
            consumer.assign([TopicPartition(topic, p, marks[p][0]) for p in todo])
        last = time.monotonic()
        while todo:
            messages = take(consumer, 1000, 0.5)
            if not messages:
                # The rest of a partition may be transaction markers or aborted records.
                for part in [q for q, e in todo.items() if reached_end(consumer, topic, q, e)]:
                    del todo[part]
                if not todo:
                    break
                if time.monotonic() - last > settings.flush_timeout:
                    raise KafkaUnavailable(
                        f"reading {topic} stalled: nothing arrived for "
                        f"{settings.flush_timeout:g} s (is the broker up?)")
                continue
            last = time.monotonic()
            for msg in messages:
                if msg.error():
                    raise KafkaUnavailable(f"reading {topic} failed: {msg.error()}")
                p, off = msg.partition(), msg.offset()
                assert p is not None and off is not None
                if p in todo and off + 1 >= todo[p]:
                    del todo[p]
                out.append((p, off, msg.key(), msg.value(), msg.headers()))
            if progress is not None:
                progress(len(out), total)
    except KafkaException as exc:
        raise KafkaUnavailable(f"reading {topic} failed: {exc}") from exc
    finally:
        consumer.close()
    return out


def read_letters(runtime: Runtime, topic: str, progress: Progress | None = None,
                 ) -> tuple[list[DeadLetter], list[str]]:
    """The dead letters of a dead-letter topic, in partition and offset order, and a note for
    each record that is not a readable DeadLetter (it is left out)."""
    codec = runtime.codec
    letters: list[DeadLetter] = []
    unreadable: list[str] = []
    for partition, offset, _key, value, headers in _read(runtime, topic, "deadletters",
                                                         progress):
        try:
            _writer, record = codec.decode(value or b"")
            letters.append(describe(record, topic=topic, partition=partition, offset=offset,
                                    headers=headers))
        except StreamsError as exc:
            unreadable.append(f"{topic}:{partition}:{offset}: {exc}")
    letters.sort(key=lambda letter: (letter.partition, letter.offset))
    return letters, unreadable


def read_redriven(runtime: Runtime, deadletter_topic: str) -> dict[str, RedriveMarker]:
    """The markers of earlier re-drives by key (none when the topic does not exist yet); the
    newest per key wins, as compaction keeps."""
    topic = redriven_topic(deadletter_topic)
    try:
        meta = runtime.admin.client.list_topics(topic, timeout=runtime.settings.admin_timeout)
    except KafkaException as exc:
        raise KafkaUnavailable(f"cannot describe {topic}: {exc}") from exc
    info = meta.topics.get(topic)
    if info is None or info.error is not None:
        return {}
    out: dict[str, RedriveMarker] = {}
    for _p, _o, key, value, _h in _read(runtime, topic, "redriven"):
        if key is not None and value is not None:
            out[key.decode()] = RedriveMarker.decode(value)
    return out


@dataclass
class RedriveResult:
    """What a re-drive did: letters re-driven (with the records each wrote) and letters it
    could not re-drive now (with why; no marker is written for them)."""

    redriven: list[tuple[Redrive, int]] = field(default_factory=list)
    failed: list[tuple[DeadLetter, str]] = field(default_factory=list)

    @property
    def records(self) -> int:
        """Records written (scores and re-published records; markers not counted)."""
        return sum(n for _r, n in self.redriven)


def _rescore(step: MirrorStep, item: Redrive) -> tuple[list[Output], str | None]:
    """The scores the mirror's step makes now of a mirror letter's bytes, or why none."""
    letter = item.letter
    skipped = step.stats.skipped_unknown_type
    outputs = step.handle(letter.source_topic, letter.source_partition, letter.source_offset,
                          letter.key, letter.value, None)
    dead = [o for o in outputs if topic_kind(o.topic) == DEADLETTER]
    if dead:
        reason = header_value(dead[0].headers, "reason") or b"?"
        return [], f"the mirror still refuses it: {reason.decode(errors='replace')}"
    if not outputs:
        if step.stats.skipped_unknown_type > skipped:
            return [], ("its feedback type is not loaded in this process: pass the module "
                        "that defines it with --types")
        return [], "it is not feedback: the mirror makes no scores of it"
    return outputs, None


def execute(runtime: Runtime, plan: RedrivePlan, tenant: str, *,
            types: FeedbackRegistry | None = None, progress: Progress | None = None,
            dry_run: bool = False) -> RedriveResult:
    """Re-drive the plan's letters: records first, then each re-driven letter's marker.
    With `dry_run`, the records are made (mirror letters are scored) but nothing is
    written and no topic created: the result says what a re-drive would do now.

    A letter that cannot be re-driven now (the mirror still refuses it, or its type is not
    loaded) gets no marker and is reported in `failed`, so a later run tries it again.
    """
    settings = runtime.settings
    if not plan.todo:
        return RedriveResult()
    marks_topic = redriven_topic(tenant_topics(tenant, settings.topic_prefix).deadletter) \
        if dry_run else runtime.admin.ensure_redriven_topic(tenant)
    step = MirrorStep(runtime.codec, prefix=settings.topic_prefix,
                      types=types or registry)
    result = RedriveResult()
    total = len(plan.todo)
    if progress is not None:
        progress(0, total)
    for start in range(0, total, _CHUNK):
        chunk = plan.todo[start:start + _CHUNK]
        records: list[Output] = []
        done: list[tuple[Redrive, int]] = []
        for item in chunk:
            letter = item.letter
            origin: Headers = [("redriven_from", f"{letter.topic}:{item.key}".encode())]
            if item.action == "rescore":
                try:
                    outputs, why = _rescore(step, item)
                except SchemaError as exc:
                    outputs, why = [], str(exc)
                if why is not None:
                    result.failed.append((letter, why))
                    continue
                made = [Output(o.topic, o.key, o.value, [*(o.headers or []), *origin])
                        for o in outputs]
            else:
                assert letter.value is not None  # the plan leaves out letters without bytes
                made = [Output(item.destination, letter.key, letter.value, origin)]
            records += made
            done.append((item, len(made)))
        if not dry_run:
            runtime.delivery.send_sync(records)
            now = datetime.now(UTC)
            runtime.delivery.send_sync([
                Output(marks_topic, item.key.encode(), RedriveMarker(
                    source=item.letter.source, action=item.action,
                    destination=item.destination, records=n, time=now).encode())
                for item, n in done])
        result.redriven += done
        if progress is not None:
            progress(min(start + _CHUNK, total), total)
    return result

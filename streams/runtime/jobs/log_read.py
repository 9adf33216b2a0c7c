"""Reading one workspace's part of a tenant's log in one pass, with progress, for reports.

    read = read_workspace_log(runtime, "acme", "prod", progress=lambda done, total: ...)
    read.envelopes      # the workspace's envelopes, in log order per partition
    read.workspaces     # every workspace the tenant's log names
    read.records        # records read (the whole topic, every workspace)

A group-less reader assigns every partition of `<prefix>.<tenant>.events` from its low
watermark and reads up to the high watermarks of the moment it started, so it commits nothing
and ends. Records of other workspaces are skipped by their `workspace` header, without
decoding; undecodable records are counted and skipped (the mirror dead-letters them).
`progress(done, total)` counts offsets read against the end offsets.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from confluent_kafka import TopicPartition

from streams.adapters.avro.codec import envelope_from_record
from streams.adapters.kafka.log import header_value, reached_end, take, watermarks
from streams.core.errors import KafkaUnavailable, NotFound, SchemaError
from streams.core.events import Envelope, Seq
from streams.core.tenancy import check_tenant, check_workspace, fresh_group, tenant_topics
from streams.runtime.root import Runtime

__all__ = ["Progress", "WorkspaceLogRead", "read_workspace_log"]

Progress = Callable[[int, int], None]
"""Called as `progress(offsets_read, offsets_to_read)` while the log is read."""

_PROGRESS_EVERY = 500


@dataclass
class WorkspaceLogRead:
    """What one pass over a tenant's events topic found for one workspace."""

    tenant: str
    workspace: str
    topic: str
    envelopes: list[Envelope] = field(default_factory=list)
    workspaces: set[str] = field(default_factory=set)
    records: int = 0
    undecodable: int = 0


def read_workspace_log(runtime: Runtime, tenant: str, workspace: str, *,
                       progress: Progress | None = None,
                       stall_timeout: float | None = None) -> WorkspaceLogRead:
    """Read the tenant's events topic to its current end, keeping `workspace`'s envelopes.

    NotFound (saying how to list tenants) when the tenant's events topic does not exist;
    KafkaUnavailable when no record arrives for `stall_timeout` seconds (default: the
    settings' flush timeout) while records are still due.
    """
    check_tenant(tenant)
    check_workspace(workspace)
    settings = runtime.settings
    topic = tenant_topics(tenant, settings.topic_prefix).events
    wait = stall_timeout if stall_timeout is not None else settings.flush_timeout
    out = WorkspaceLogRead(tenant=tenant, workspace=workspace, topic=topic)
    consumer = runtime.reader(fresh_group("report"))
    try:
        try:
            marks = watermarks(consumer, topic, timeout=settings.admin_timeout)
        except NotFound as exc:
            raise NotFound(f"no tenant {tenant!r}: its events topic {topic} does not exist "
                           "(`streams tenant list` shows the tenants; check "
                           "STREAMS_TOPIC_PREFIX)") from exc
        todo = {p: high for p, (low, high) in marks.items() if high > low}
        position = {p: low for p, (low, _high) in marks.items()}
        total = sum(high - low for low, high in marks.values())
        done = 0
        if progress is not None:
            progress(0, total)
        if todo:
            consumer.assign([TopicPartition(topic, p, position[p]) for p in todo])
        wanted = workspace.encode()
        named_raw: set[bytes] = set()
        last = time.monotonic()
        since_report = 0
        codec = runtime.codec
        while todo:
            # Batches and fastavro against cached writer schemas: a report reads whole logs.
            messages = take(consumer, 1000, 0.5)
            if not messages:
                # The rest of a partition may be transaction markers or aborted records.
                for p in [p for p, e in todo.items() if reached_end(consumer, topic, p, e)]:
                    done += todo[p] - position[p]
                    position[p] = todo.pop(p)
                if not todo:
                    break
                if time.monotonic() - last > wait:
                    raise KafkaUnavailable(
                        f"reading {topic} stalled: nothing arrived for {wait:g} s with "
                        f"{total - done} records still to read (is the broker up?)")
                continue
            last = time.monotonic()
            for msg in messages:
                if msg.error():
                    raise KafkaUnavailable(f"reading {topic} failed: {msg.error()}")
                partition, offset = msg.partition(), msg.offset()
                assert partition is not None and offset is not None
                step = offset + 1 - position.get(partition, offset)
                position[partition] = offset + 1
                done += step
                since_report += step
                if partition in todo and offset + 1 >= todo[partition]:
                    del todo[partition]
                out.records += 1
                if progress is not None and since_report >= _PROGRESS_EVERY:
                    progress(done, total)
                    since_report = 0
                named = header_value(msg.headers(), "workspace")
                if named is not None:
                    named_raw.add(named)  # decoded once, at the end
                    if named != wanted:
                        continue
                try:
                    _writer, record = codec.decode(msg.value() or b"")
                    envelope = envelope_from_record(record, Seq(partition=partition,
                                                                offset=offset))
                except SchemaError:
                    out.undecodable += 1
                    continue
                out.workspaces.add(envelope.workspace)
                if envelope.workspace == workspace:
                    out.envelopes.append(envelope)
        out.workspaces.update(n.decode(errors="replace") for n in named_raw)
        if progress is not None:
            progress(total, total)
    finally:
        consumer.close()
    return out

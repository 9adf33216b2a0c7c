"""The tuned floor: the feedback mirror's job done as fast as Python can on this machine.

The reference every mirror figure is divided by. No framework and no per-record objects:
confluent-kafka `consume(1000)` batches; fastavro schemaless decode with the writer's schema
cached per registry id (logical types dropped, timestamps stay epoch millis); each value
mapped straight to Score dicts; schemaless encode against a pre-parsed Score schema behind a
hand-made 5-byte frame, a feedback's shared fields (time, trace, session, source) written
once for all its scores; an lz4, linger 20 ms, idempotent producer with error-only delivery
reports; a commit after a flush every 10 batches. It does not validate values or build dead
letters: the mirror must, so the ratio shows what that costs.

With `transactional=True` it is the exactly-once floor: the same producer with a
transactional.id, a transaction per 10 batches, committed with the consumer's positions
through `send_offsets_to_transaction` (what the mirror does with
STREAMS_PROCESSING_GUARANTEE=exactly_once), so the two guarantees' floors compare too.

Run through bench.mirror_throughput, which times it on the same data as the mirror.
"""

from __future__ import annotations

import io
import json
import struct
import time
import uuid
from typing import Any

import fastavro
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.schema_registry import Schema as RegistrySchema
from confluent_kafka.schema_registry import SchemaRegistryClient

from streams.adapters.avro.fast import without_logical_types
from streams.adapters.avro.schemas import score_schema
from streams.adapters.kafka.config import TRANSACTION_RETRY_BACKOFF_MS
from streams.core.scores import ScoreConfigs, score_id
from streams.core.subjects import subject_of

__all__ = ["run_floor"]

_FRAME = struct.Struct(">bI")


def _configs_map(configs: dict[str, ScoreConfigs]) -> dict[str, list[tuple[str, str, str]]]:
    return {name: [(c.field, c.name, c.data_type) for c in cfg.configs]
            for name, cfg in configs.items()}


def _commit(consumer: Consumer) -> None:
    try:
        consumer.commit(asynchronous=False)
    except KafkaException as exc:  # nothing new since the last commit
        if exc.args[0].code() != KafkaError._NO_OFFSET:
            raise


def _commit_transaction(consumer: Consumer, producer: Producer) -> None:
    positions = [tp for tp in consumer.position(consumer.assignment()) if tp.offset >= 0]
    if positions:
        producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 30)
    producer.commit_transaction(30)


def run_floor(bootstrap: str, registry_url: str, events_topic: str, out_topic: str, n: int,
              configs: dict[str, ScoreConfigs], batch: int = 1000,
              security: dict[str, Any] | None = None,
              transactional: bool = False,
              subject_topic: str | None = None) -> dict[str, float]:
    """Mirror `n` feedback records from `events_topic` to `out_topic`; returns the rate and
    the process's CPU seconds. `security`: librdkafka security settings for both clients
    (e.g. SASL_SSL); `transactional`: exactly once (see the module); `subject_topic`: the
    topic whose subject the score schema is registered under (default `out_topic`)."""
    registry = SchemaRegistryClient({"url": registry_url})
    schema = score_schema()
    # Under the subject the mirror registers for its scores topic (pass it as
    # `subject_topic`), so both write the same schema id and their outputs compare byte for
    # byte: the registry gives each subject's version an id of its own.
    named_by = subject_topic or out_topic
    score_id_num = registry.register_schema(
        subject_of(named_by, "streams.scores.Score", named_by.split(".")[0]),
        RegistrySchema(json.dumps(schema), "AVRO"))
    # Cut before `timestamp`: a feedback's scores share every field from there on (time,
    # trace, session, source), so those are written once per feedback and their bytes
    # appended to each score's own fields' (Avro writes a record as its fields' encodings
    # one after another), as the mirror does (FastCodec.encode_all's `shared_from`).
    plain = without_logical_types(schema)
    cut = [f["name"] for f in plain["fields"]].index("timestamp")
    score_parsed = fastavro.parse_schema(plain)
    head_parsed, tail_parsed = (
        fastavro.parse_schema({"type": "record", "name": f"FloorScore{part}",
                               "namespace": plain["namespace"], "fields": kept})
        for part, kept in (("Head", plain["fields"][:cut]), ("Tail", plain["fields"][cut:])))
    header = _FRAME.pack(0, score_id_num)
    writers: dict[int, Any] = {}
    fields = _configs_map(configs)
    failed = [0]

    def on_error(err: Any, _msg: Any) -> None:
        failed[0] += 1

    consumer = Consumer({"bootstrap.servers": bootstrap,
                         "group.id": f"bench-floor-{uuid.uuid4().hex}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         **(security or {})})
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "acks": "all", "linger.ms": 20, "compression.type": "lz4",
                         "batch.num.messages": 10000, "delivery.report.only.error": True,
                         "on_delivery": on_error, **(security or {}),
                         # The transactional floor retries as soon as the mirror does
                         # (see transactional_producer_config).
                         **({"transactional.id": f"bench-floor-{uuid.uuid4().hex}",
                             "retry.backoff.ms": TRANSACTION_RETRY_BACKOFF_MS}
                            if transactional else {})})
    if transactional:
        producer.init_transactions(30)
    consumer.subscribe([events_topic])
    in_transaction = False
    cpu = 0.0
    seen = 0
    batches = 0
    first: float | None = None
    reader = fastavro.schemaless_reader
    writer_fn = fastavro.schemaless_writer
    produce = producer.produce
    while seen < n:
        messages = consumer.consume(batch, timeout=1.0)
        if not messages:
            continue
        if first is None:
            first = time.monotonic()
            cpu = time.process_time()
        if transactional and not in_transaction:
            producer.begin_transaction()
            in_transaction = True
        for msg in messages:
            if msg.error():
                continue
            seen += 1
            data = msg.value()
            sid = _FRAME.unpack_from(data)[1]
            parsed = writers.get(sid)
            if parsed is None:
                raw = json.loads(registry.get_schema(sid).schema_str)
                parsed = writers[sid] = fastavro.parse_schema(without_logical_types(raw))
            stream = io.BytesIO(data)
            stream.seek(5)
            record = reader(stream, parsed, None)
            head = record["envelope"]
            if head["event_type"] != "feedback_given":
                continue
            value = record["value"]
            event_id = head["event_id"]
            target = record["target"]
            trace_id = record.get("target_trace_id")
            actor = head["actor"]
            participant = f"{actor['kind']}:{actor['id']}"
            source = {"tenant": head["tenant"], "workspace": head["workspace"],
                      "feedback_type": record["feedback_type"],
                      "target_kind": target["kind"], "target_id": target["id"],
                      "participant": participant, "feedback_event_id": event_id,
                      "seq": f"{msg.partition()}:{msg.offset()}", "rule": None, "action": None}
            key = event_id.encode()
            heads = []
            for field, name, data_type in fields[record["feedback_type"]]:
                raw_value = value.get(field)
                if raw_value is None:
                    continue
                if data_type == "BOOLEAN":
                    numeric: float | None = 1.0 if raw_value else 0.0
                    text = None
                elif data_type == "NUMERIC":
                    numeric, text = float(raw_value), None
                else:
                    numeric, text = None, str(raw_value)
                heads.append({"id": score_id(event_id, name), "name": name,
                              "data_type": data_type, "numeric_value": numeric,
                              "string_value": text})
            if not heads:
                continue
            shared_fields = {
                "timestamp": head["time"], "trace_id": trace_id,
                "session_id": None if trace_id else head["correlation_id"],
                "observation_id": None, "comment": None, "source": source}
            if len(heads) == 1:  # one score: written whole, as the mirror writes it
                out = io.BytesIO()
                out.write(header)
                writer_fn(out, score_parsed, heads[0] | shared_fields)
                encoded = [out.getvalue()]
            else:
                shared = io.BytesIO()
                writer_fn(shared, tail_parsed, shared_fields)
                tail = shared.getvalue()
                encoded = []
                for score in heads:
                    out = io.BytesIO()
                    out.write(header)
                    writer_fn(out, head_parsed, score)
                    out.write(tail)
                    encoded.append(out.getvalue())
            for data in encoded:
                while True:
                    try:
                        produce(out_topic, data, key)
                        break
                    except BufferError:
                        producer.poll(0.05)
        producer.poll(0)
        batches += 1
        if batches % 10 == 0:
            if transactional:
                _commit_transaction(consumer, producer)
                in_transaction = False
            else:
                producer.flush(30)
                _commit(consumer)
    # CPU up to the last record's work (as the mirror benchmarks count theirs); wall time
    # up to the last commit.
    cpu = time.process_time() - cpu
    if in_transaction:
        _commit_transaction(consumer, producer)
    producer.flush(30)
    if not transactional:
        _commit(consumer)
    last = time.monotonic()
    consumer.close()
    if failed[0]:
        raise SystemExit(f"floor: {failed[0]} deliveries failed")
    assert first is not None
    return {"seconds": last - first, "rate": n / (last - first), "cpu_s": cpu}

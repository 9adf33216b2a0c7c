"""What the benchmarks that read a whole topic share: the decode floor."""

from __future__ import annotations

import time

from confluent_kafka import TopicPartition

from streams.adapters.kafka.log import take, watermarks
from streams.core.tenancy import fresh_group
from streams.runtime.root import Runtime

__all__ = ["decode_topic"]


def decode_topic(runtime: Runtime, topic: str, stall_s: float = 60.0) -> int:
    """Read every record of `topic` up to its end offsets of now, in batches, and decode
    each with the fast codec (fastavro against cached writer schemas), keeping nothing: what
    any whole-log reader must at least do, as fast as Python can. The records decoded.
    Stops the bench (SystemExit) on an errored record or after `stall_s` without one."""
    consumer = runtime.reader(fresh_group("bench-floor"))
    try:
        marks = watermarks(consumer, topic)
        todo = {p: high for p, (low, high) in marks.items() if high > low}
        consumer.assign([TopicPartition(topic, p, marks[p][0]) for p in todo])
        decode = runtime.codec.decode
        n = 0
        deadline = time.monotonic() + stall_s
        while todo:
            for msg in take(consumer, 1000, 0.5):
                if msg.error():
                    raise SystemExit(f"reading {topic} failed: {msg.error()}")
                decode(msg.value() or b"")
                n += 1
                p, offset = msg.partition(), msg.offset()
                if p in todo and offset is not None and offset + 1 >= todo[p]:
                    del todo[p]
                deadline = time.monotonic() + stall_s
            if todo and time.monotonic() > deadline:
                raise SystemExit(f"read {n} records of {topic}, then nothing for {stall_s:g} s")
        return n
    finally:
        consumer.close()

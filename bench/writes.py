"""What the benchmarks share to write their input: an envelope encoded and produced, waiting
for room when the producer's local queue is full."""

from __future__ import annotations

from confluent_kafka import Producer

from streams.adapters.avro.serde import AvroSerde
from streams.adapters.kafka.log import envelope_headers
from streams.core.events import Envelope

__all__ = ["produce_envelope"]


def produce_envelope(producer: Producer, serde: AvroSerde, topic: str,
                     envelope: Envelope) -> bytes:
    """Encode `envelope` for `topic` and produce it keyed by its chain (as the handle does);
    return the encoded value. Nothing is flushed."""
    value = serde.encode_envelope(envelope, topic)
    while True:
        try:
            producer.produce(topic, value, key=envelope.correlation_id.encode(),
                             headers=envelope_headers(envelope))
            return value
        except BufferError:  # the local queue is full: let it drain
            producer.poll(0.05)

"""What the definitions kept as data (the rulebook, the queues) share on the broker: a
compacted topic of entries, newest per key, read to its end and written one at a time."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from confluent_kafka import KafkaException

from streams.core.errors import KafkaUnavailable, ValidationFailed
from streams.runtime.root import Runtime

__all__ = ["EntryView", "read_entries", "topic_exists", "write_entry"]

log = logging.getLogger(__name__)
_E = TypeVar("_E")


def topic_exists(runtime: Runtime, topic: str) -> bool:
    """Whether `topic` exists; KafkaUnavailable when the brokers cannot say."""
    try:
        meta = runtime.admin.client.list_topics(topic, timeout=runtime.settings.admin_timeout)
    except KafkaException as exc:
        raise KafkaUnavailable(f"cannot list topics: {exc}; check the brokers") from exc
    info = meta.topics.get(topic)
    return info is not None and info.error is None


def read_entries(runtime: Runtime, topic: str,
                 decode: Callable[[bytes], _E]) -> dict[str, _E]:
    """The newest entry per key of a compacted topic ({} when the topic does not exist); a
    value `decode` refuses (ValidationFailed) is skipped with a warning, a tombstone drops
    its key."""
    if not topic_exists(runtime, topic):
        return {}
    reader = runtime.topic_reader(topic)
    found: dict[str, _E] = {}
    try:
        for msg in reader.read_to_end():
            key = (msg.key() or b"").decode()
            value = msg.value()
            if value is None:
                found.pop(key, None)
                continue
            try:
                found[key] = decode(value)
            except ValidationFailed as exc:
                log.warning("%s: skipping %r: %s", topic, key, exc)
    finally:
        reader.close()
    return found


def write_entry(runtime: Runtime, topic: str, key: bytes, value: bytes, what: str,
                then: str) -> None:
    """Write one entry and wait for its acknowledgement; KafkaUnavailable naming `what` and
    what to do `then` when it is not acknowledged within STREAMS_FEEDBACK_TIMEOUT."""
    errors: list[str] = []

    def report(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(str(err))

    producer = runtime.producer
    producer.produce(topic, key=key, value=value, on_delivery=report)
    left = producer.flush(runtime.settings.feedback_timeout)
    if errors or left:
        raise KafkaUnavailable(f"{what} was not acknowledged "
                               f"({'; '.join(errors) or 'timed out'}); {then}")


class EntryView(Generic[_E]):
    """The newest entry per key of a compacted topic, kept current by a live tail: a server
    that answers every request from the topic reads it once, then only what is written
    (`read_entries` for a one-off read, as the CLI does)."""

    def __init__(self, runtime: Runtime, topic: str, decode: Callable[[bytes], _E]) -> None:
        self.topic = topic
        self._decode = decode
        self._found: dict[str, _E] = {}
        self._lock = threading.Lock()
        self._tail = runtime.tail(topic, self._apply)

    def _apply(self, _partition: int, _offset: int, key: bytes, value: bytes | None) -> None:
        name = key.decode()
        if value is None:
            with self._lock:
                self._found.pop(name, None)
            return
        try:
            entry = self._decode(value)
        except ValidationFailed as exc:
            log.warning("%s: skipping %r: %s", self.topic, name, exc)
            return
        with self._lock:
            self._found[name] = entry

    def start(self) -> None:
        """Follow the topic from its start (blocking: the topic is looked up)."""
        self._tail.start()

    def current(self) -> dict[str, _E]:
        """Every key's newest entry as of now: what was written before the call has been
        read (KafkaUnavailable when the brokers cannot say where the topic ends)."""
        self._tail.sync()
        with self._lock:
            return dict(self._found)

    def close(self) -> None:
        """Stop following."""
        self._tail.close()

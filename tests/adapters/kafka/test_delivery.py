"""Delivery on a shared producer: a batch waits for its own delivery reports, whichever
thread serves them, and produces the failed ones again (no broker: a fake producer)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from streams.adapters.kafka.delivery import Delivery
from streams.adapters.kafka.outputs import Output
from streams.settings import Settings


class SharedProducer:
    """A producer whose delivery reports another thread serves, a little after `flush`
    has already found the queue empty; the first report of `fail_first` records fails."""

    def __init__(self, fail_first: set[bytes]) -> None:
        self.fail_first = set(fail_first)
        self.produced: list[bytes] = []
        self._pending: list[tuple[bytes, Callable[[Any, Any], None]]] = []

    def produce(self, topic: str, *, value: bytes, key: bytes | None, headers: Any,
                on_delivery: Callable[[Any, Any], None]) -> None:
        self.produced.append(value)
        self._pending.append((value, on_delivery))

    def flush(self, _timeout: float) -> int:
        pending, self._pending = self._pending, []

        def serve() -> None:
            time.sleep(0.05)
            for value, report in pending:
                failed = value in self.fail_first
                self.fail_first.discard(value)
                report("broker said no" if failed else None, None)

        threading.Thread(target=serve).start()
        return 0  # the queue is empty; the reports are still on their way

    def poll(self, _timeout: float) -> int:
        return 0


def test_a_batch_waits_for_its_reports_and_retries_what_failed() -> None:
    producer = SharedProducer(fail_first={b"b"})
    delivery = Delivery(Settings(delivery_max_backoff=0.01), producer=producer)  # type: ignore[arg-type]
    delivery.send_sync([Output("t", None, v) for v in (b"a", b"b", b"c")])
    assert producer.produced == [b"a", b"b", b"c", b"b"]
    assert (delivery.delivered, delivery.retries) == (3, 1)

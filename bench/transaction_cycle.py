"""What one Kafka transaction costs on this broker, by the transactional producer's first
retry backoff: a loop of transactions of `--records` records each (begin, produce, send the
offsets with a consumer's group metadata, commit), as an exactly-once loop runs them one
after the other, timing each step.

The step to watch is sending the offsets: a transaction begun right after the previous one
committed finds the coordinator still writing that one's markers, its offsets are refused
once (CONCURRENT_TRANSACTIONS) and retried after `retry.backoff.ms`. The project's
transactional producer uses TRANSACTION_RETRY_BACKOFF_MS (see
streams.adapters.kafka.config); librdkafka's default is 100 ms.

    eval "$(deploy/stack.sh env)"
    .venv/bin/python -m bench.transaction_cycle --backoffs 100,20,10,5
"""

from __future__ import annotations

import argparse
import time
import uuid

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from rich.console import Console

from bench.e2e_latency import percentile
from streams.adapters.kafka.config import admin_config, consumer_config, producer_config
from streams.settings import Settings

console = Console(stderr=True)
STEPS = ("begin+produce", "send_offsets", "commit", "total")


def cycle(settings: Settings, topic: str, backoff_ms: int, transactions: int,
          records: int, producers: int = 1) -> dict[str, list[float]]:
    """`transactions` transactions in a row with `retry.backoff.ms` = backoff_ms, taking
    turns over `producers` transactional producers; each step's seconds."""
    pool = [Producer(producer_config(settings, **{
        "transactional.id": f"{topic}-{backoff_ms}-{producers}-{n}",
        "retry.backoff.ms": backoff_ms})) for n in range(producers)]
    consumer = Consumer(consumer_config(settings, f"{topic}-{backoff_ms}-{producers}"))
    consumer.subscribe([topic])
    consumer.poll(3.0)  # joined: its group metadata is what a loop would send
    for producer in pool:
        producer.init_transactions(30)
    taken: dict[str, list[float]] = {step: [] for step in STEPS}
    value = b"x" * 200
    try:
        for i in range(transactions):
            producer = pool[i % producers]
            t0 = time.perf_counter()
            producer.begin_transaction()
            for j in range(records):
                producer.produce(topic, value, key=str(j).encode())
            t1 = time.perf_counter()
            producer.send_offsets_to_transaction(
                [TopicPartition(topic, 0, i + 1)], consumer.consumer_group_metadata(), 30)
            t2 = time.perf_counter()
            producer.commit_transaction(30)
            t3 = time.perf_counter()
            for step, seconds in zip(STEPS, (t1 - t0, t2 - t1, t3 - t2, t3 - t0), strict=True):
                taken[step].append(seconds)
    finally:
        consumer.close()
    return taken


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backoffs", default="100,20,10,5",
                        help="retry.backoff.ms values to compare, in order")
    parser.add_argument("--transactions", type=int, default=200)
    parser.add_argument("--records", type=int, default=10)
    parser.add_argument("--producers", default="1",
                        help="how many transactional producers take turns, values to compare "
                             "(a producer's next transaction waits for its last one's "
                             "markers; another producer's does not)")
    args = parser.parse_args()
    settings = Settings.from_env()
    topic = f"bench-txn-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(admin_config(settings))
    admin.create_topics([NewTopic(topic, 3, 1)])[topic].result()
    try:
        for backoff, producers in ((int(b), int(n)) for b in args.backoffs.split(",")
                                   for n in args.producers.split(",")):
            console.print(f"{args.transactions} transactions, retry.backoff.ms={backoff}, "
                          f"{producers} producer(s)...")
            taken = cycle(settings, topic, backoff, args.transactions, args.records,
                          producers)
            print(f"retry_backoff_ms={backoff} producers={producers} " + " ".join(
                f"{step}_p50_ms={percentile(v, 0.5) * 1000:.1f} "
                f"{step}_p99_ms={percentile(v, 0.99) * 1000:.1f}"
                for step, v in taken.items()))
    finally:
        admin.delete_topics([topic])


if __name__ == "__main__":
    main()

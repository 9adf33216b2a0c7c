"""Faust's own ceiling here: a worker whose agent does nothing but take events in batches.

Produces N small records to a topic and times a Faust app (aiokafka driver, the same settings
as the feedback mirror's worker) consuming them with a no-op `take_events` agent. Whatever the
mirror does per event comes on top of this.

    eval "$(deploy/stack.sh env)"
    .venv/bin/python -m bench.faust_ceiling --events 50000
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import uuid
from typing import Any

import faust
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from streams.adapters.kafka.config import admin_config, faust_settings, producer_config
from streams.settings import Settings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=50_000)
    parser.add_argument("--batch", type=int, default=1000)
    args = parser.parse_args()
    settings = Settings.from_env()
    topic = f"ceiling.{uuid.uuid4().hex[:8]}"
    admin = AdminClient(admin_config(settings))
    admin.create_topics([NewTopic(topic, 3, 1)])[topic].result()
    producer = Producer(producer_config(settings, **{"linger.ms": 20}))
    for i in range(args.events):
        while True:
            try:
                producer.produce(topic, b"x" * 140, key=str(i % 997).encode(),
                                 headers=[("event_type", b"feedback_given")])
                break
            except BufferError:
                producer.poll(0.1)
    producer.flush(60)

    datadir = tempfile.mkdtemp(prefix="faust-ceiling-")
    app = faust.App(f"ceiling-{uuid.uuid4().hex[:6]}", **faust_settings(settings),
                    value_serializer="raw", key_serializer="raw", topic_allow_declare=False,
                    topic_disable_leader=True, web_enabled=False, datadir=datadir,
                    consumer_auto_offset_reset="earliest",
                    stream_buffer_maxsize=args.batch * 4,
                    broker_max_poll_records=args.batch, stream_wait_empty=False)
    source = app.topic(topic, value_serializer="raw", key_serializer="raw")
    seen = {"n": 0, "first": 0.0}

    async def noop(stream: Any) -> None:
        async for events in stream.take_events(args.batch, within=0.05):
            if not seen["n"]:
                seen["first"] = time.monotonic()
            seen["n"] += len(events)
            if seen["n"] >= args.events:
                elapsed = time.monotonic() - seen["first"]
                print(f"events={args.events} faust_noop_rate={args.events / elapsed:.0f}/s",
                      flush=True)
                os._exit(0)

    app.agent(source, name="noop")(noop)
    sys.argv = ["ceiling", "worker", "-l", "warn", "--without-web"]
    app.main()


if __name__ == "__main__":
    main()

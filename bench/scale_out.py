"""One mirror worker against two in the same consumer group, on the same data.

Produces N feedback events to one tenant (STREAMS_PARTITIONS partitions, 3 by default), then
runs one `streams worker` and, in a new consumer group, two, each until every score is on the
scores topic, and prints both rates and their ratio. On a 2-core machine the two workers share
the cores with the broker, so the ratio shows what a second process buys here, not on a
larger machine.

    eval "$(deploy/stack.sh env)"
    .venv/bin/python -m bench.scale_out --events 50000
"""

from __future__ import annotations

import argparse
import uuid

from rich.console import Console

from bench.mirror_throughput import SCORES_PER_EVENT, produce_feedback, run_faust
from streams.adapters.avro.serde import AvroSerde
from streams.adapters.kafka.admin import TenantAdmin
from streams.core.tenancy import tenant_topics
from streams.settings import Settings

console = Console(stderr=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=50_000)
    parser.add_argument("--batch", type=int, default=1000)
    args = parser.parse_args()
    settings = Settings.from_env(topic_prefix=f"bench{uuid.uuid4().hex[:6]}")
    tenant = "bench"
    TenantAdmin(settings).create_tenant(tenant)
    topics = tenant_topics(tenant, settings.topic_prefix)
    console.print(f"producing {args.events} feedback events to {topics.events} "
                  f"({settings.partitions} partitions)")
    produce_feedback(settings, AvroSerde(settings), topics.events, tenant, args.events)
    one = run_faust(settings, tenant, args.events, args.batch, workers=1)
    console.print(f"  one worker: {one['rate']:,.0f} feedback/s")
    two = run_faust(settings, tenant, args.events, args.batch, workers=2,
                    already=args.events * SCORES_PER_EVENT)
    console.print(f"  two workers: {two['rate']:,.0f} feedback/s")
    print(f"events={args.events} partitions={settings.partitions} one_worker={one['rate']:.0f}/s "
          f"two_workers={two['rate']:.0f}/s ratio={two['rate'] / one['rate']:.2f}")


if __name__ == "__main__":
    main()

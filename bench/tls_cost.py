"""What TLS costs the feedback mirror: the tuned floor and the mirror's batch data path, each
over the stack's PLAINTEXT listener and over its SASL_SSL listener (SCRAM over TLS), on the
same N feedback events in one run.

    eval "$(deploy/stack.sh env)"     # KAFKA_SSL_PORT, STACK_CA_LOCATION
    .venv/bin/python -m bench.tls_cost --events 20000

Prints the rates, the mirror's ratio to the floor over the same listener, and each path's rate
over TLS divided by its rate without. Every output is checked: both floors' score records and
both mirror runs' are byte for byte the same multiset.
"""

from __future__ import annotations

import argparse
import os
import uuid

from confluent_kafka.admin import AdminClient, NewTopic

from bench.floor import run_floor
from bench.mirror_throughput import (
    SCORES_PER_EVENT,
    console,
    produce_feedback,
    run_batch_mirror,
    topic_values,
)
from streams.adapters.avro.serde import AvroSerde
from streams.adapters.kafka.admin import TenantAdmin
from streams.adapters.kafka.config import admin_config, security_config
from streams.core.scores import score_configs
from streams.core.tenancy import tenant_topics
from streams.examples.ops import TriageQuality
from streams.settings import Settings


def tls_settings(plain: Settings) -> Settings:
    """The same stack through its SASL_SSL listener, as the stack's admin."""
    port, ca = os.environ.get("KAFKA_SSL_PORT"), os.environ.get("STACK_CA_LOCATION")
    if not port or not ca:
        raise SystemExit("set KAFKA_SSL_PORT and STACK_CA_LOCATION: "
                         "eval \"$(deploy/stack.sh env)\"")
    return plain.replace(bootstrap_servers=f"127.0.0.1:{port}", security_protocol="SASL_SSL",
                         sasl_mechanism="SCRAM-SHA-512", sasl_username="admin",
                         sasl_password=os.environ.get("STACK_ADMIN_PASSWORD", "admin-secret"),
                         ssl_ca_location=ca)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=1000)
    args = parser.parse_args()
    plain = Settings.from_env(topic_prefix=f"bench{uuid.uuid4().hex[:6]}")
    tls = tls_settings(plain)
    tenant = "bench"
    TenantAdmin(plain).create_tenant(tenant)
    topics = tenant_topics(tenant, plain.topic_prefix)
    console.print(f"producing {args.events} feedback events to {topics.events}")
    produce_feedback(plain, AvroSerde(plain), topics.events, tenant, args.events)
    outs = {name: f"{plain.topic_prefix}.floor-{name}.scores" for name in ("plain", "tls")}
    admin = AdminClient(admin_config(plain))
    for future in admin.create_topics([NewTopic(t, plain.partitions, 1)
                                       for t in outs.values()]).values():
        future.result()
    configs = {"triage_quality": score_configs(TriageQuality)}
    want = args.events * SCORES_PER_EVENT

    rates: dict[str, float] = {}
    for name, settings in (("plain", plain), ("tls", tls)):
        console.print(f"tuned floor over {settings.security_protocol}...")
        floor = run_floor(settings.bootstrap_servers, settings.schema_registry_url,
                          topics.events, outs[name], args.events, configs, args.batch,
                          security=security_config(settings), subject_topic=topics.scores)
        rates[f"floor_{name}"] = floor["rate"]
        console.print(f"  {floor['rate']:,.0f} feedback/s ({floor['seconds']:.1f}s)")
    for name, settings in (("plain", plain), ("tls", tls)):
        console.print(f"batch mirror over {settings.security_protocol}...")
        mirror = run_batch_mirror(settings, tenant, args.events, args.batch)
        rates[f"mirror_{name}"] = mirror["rate"]
        console.print(f"  {mirror['rate']:,.0f} feedback/s ({mirror['seconds']:.1f}s)")

    floor_plain = topic_values(plain, outs["plain"], want)
    floor_tls = topic_values(plain, outs["tls"], want)
    mirrored = topic_values(plain, topics.scores, 2 * want)
    same = sorted(floor_plain) == sorted(floor_tls) and sorted(floor_plain * 2) == sorted(mirrored)
    console.print(f"  outputs: floors {len(floor_plain)} and {len(floor_tls)}, mirror runs "
                  f"{len(mirrored)}, byte-identical: {same}")
    if len(floor_plain) != want or not same:
        raise SystemExit("the runs did not write the same scores")
    print(f"events={args.events} batch={args.batch} "
          + " ".join(f"{k}_rate={v:.0f}/s" for k, v in rates.items())
          + f" mirror_ratio_plain={rates['mirror_plain'] / rates['floor_plain']:.2f}"
          + f" mirror_ratio_tls={rates['mirror_tls'] / rates['floor_tls']:.2f}"
          + f" floor_tls_over_plain={rates['floor_tls'] / rates['floor_plain']:.2f}"
          + f" mirror_tls_over_plain={rates['mirror_tls'] / rates['mirror_plain']:.2f}")


if __name__ == "__main__":
    main()

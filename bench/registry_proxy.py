"""What `streams registry-proxy` costs a registry request, against the registry asked directly.

Creates a tenant with a principal (as the stack's `admin` on the SASL listener), registers one
schema under the tenant's subject, starts the proxy, then times the look-ups a client makes
when it meets a schema (by subject, and by id) over keep-alive HTTP: directly (the floor) and
through the proxy with the tenant's credentials, rounds alternating. Prints milliseconds per
request, the ratio, the proxy process's CPU µs per request, and what a first request costs
(the broker checking the password: one SCRAM login of a fresh client).

Clients cache what they look up (confluent-kafka's registry client, FastCodec), so these are
costs per process and schema, not per record.

    eval "$(deploy/stack.sh env)"
    .venv/bin/python -m bench.registry_proxy --requests 500 --rounds 4
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
import uuid

import httpx
from rich.console import Console

from bench.served import cpu_seconds
from streams.adapters.avro.schemas import score_schema
from streams.adapters.kafka.access import TenantAccess, new_password
from streams.adapters.kafka.admin import TenantAdmin
from streams.core.subjects import subject_of
from streams.core.tenancy import tenant_topics
from streams.settings import Settings

console = Console(stderr=True)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _time(client: httpx.Client, paths: list[str], n: int) -> float:
    start = time.perf_counter()
    for i in range(n):
        answer = client.get(paths[i % len(paths)])
        assert answer.status_code == 200, answer.text
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    sasl = os.environ.get("KAFKA_SASL_PORT")
    if not sasl:
        sys.exit("needs the stack's SASL listener: eval \"$(deploy/stack.sh env)\"")
    admin = Settings.from_env(topic_prefix=f"bench{uuid.uuid4().hex[:6]}").replace(
        bootstrap_servers=f"127.0.0.1:{sasl}", security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="SCRAM-SHA-512", sasl_username="admin",
        sasl_password=os.environ.get("STACK_ADMIN_PASSWORD", "admin-secret"))
    tenant, password = "bench", new_password()
    TenantAdmin(admin).create_tenant(tenant)
    access = TenantAccess(admin)
    user = access.create_principal(tenant, password).user
    subject = subject_of(tenant_topics(tenant, admin.topic_prefix).scores,
                         "streams.scores.Score", admin.topic_prefix)
    registry = admin.schema_registry_url.rstrip("/")
    schema_id = httpx.post(f"{registry}/subjects/{subject}/versions",
                           json={"schema": json.dumps(score_schema())}).json()["id"]
    port = _free_port()
    proxy = subprocess.Popen([sys.executable, "-m", "streams", "registry-proxy"],
                             env=admin.replace(registry_proxy_port=port).child_env(),
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    paths = [f"/subjects/{subject}/versions/latest", f"/schemas/ids/{schema_id}"]
    try:
        url = f"http://127.0.0.1:{port}"
        for _ in range(300):
            try:
                httpx.get(f"{url}/schemas/types", timeout=1.0)
                break
            except httpx.HTTPError:
                time.sleep(0.1)
        logins = []
        for _ in range(5):  # a new password each time: the proxy asks the broker every time
            fresh = new_password()
            access.set_password(tenant, fresh)
            start = time.perf_counter()
            httpx.get(f"{url}{paths[0]}", auth=(user, fresh)).raise_for_status()
            logins.append(time.perf_counter() - start)
        access.set_password(tenant, password)
        direct_total = proxied_total = cpu_total = 0.0
        with httpx.Client(base_url=registry) as direct, \
                httpx.Client(base_url=url, auth=(user, password)) as proxied:
            _time(direct, paths, 20)
            _time(proxied, paths, 20)
            for rnd in range(args.rounds):
                d = _time(direct, paths, args.requests)
                cpu = cpu_seconds(proxy.pid)
                p = _time(proxied, paths, args.requests)
                cpu_total += cpu_seconds(proxy.pid) - cpu
                direct_total += d
                proxied_total += p
                console.print(f"round {rnd + 1}: direct {d / args.requests * 1000:.2f} ms, "
                              f"proxy {p / args.requests * 1000:.2f} ms per request")
        n = args.requests * args.rounds
        print(json.dumps({
            "requests": n,
            "direct_ms": round(direct_total / n * 1000, 3),
            "proxy_ms": round(proxied_total / n * 1000, 3),
            "ratio": round(proxied_total / direct_total, 2),
            "proxy_cpu_us_per_request": round(cpu_total / n * 1e6, 1),
            "first_request_ms_median": round(sorted(logins)[len(logins) // 2] * 1000, 1),
        }))
    finally:
        proxy.terminate()
        proxy.wait(30)
        TenantAdmin(admin).delete_tenant(tenant)
        access.delete_principal(tenant)


if __name__ == "__main__":
    main()

"""deploy/k8s: the kustomizations render, every object matches the Kubernetes and KEDA schemas
(kubeconform -strict through deploy/k8s/validate.sh), and the pieces agree with each other and
with the settings: KEDA watches the mirror's consumer group, the probes hit the declared ports,
the ConfigMap and Secret make valid Settings, no secret sits in the ConfigMap.

No cluster, no Docker: validate.sh needs Go and the package registries (cold cache: about a
minute and a half, then seconds).
"""

from __future__ import annotations

import base64
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from streams.settings import Settings, declared
from tests.deploy.manifests import REPO
from tests.deploy.matrix import claims

pytestmark = pytest.mark.timeout(600)

VALIDATE = REPO / "deploy" / "k8s" / "validate.sh"
# Not secret themselves, but a credential's other half: kept beside it in the Secret.
CREDENTIAL_NAMES = {"KAFKA_SASL_USERNAME", "SCHEMA_REGISTRY_USERNAME", "LANGFUSE_PUBLIC_KEY",
                    "STREAMS_REGISTRY_UPSTREAM_USERNAME"}


def validate(*dirs: Path, out: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "K8S_OUT": str(out),
           "PYTHON": os.environ.get("PYTHON", sys.executable)}
    return subprocess.run([str(VALIDATE), *map(str, dirs)], env=env, capture_output=True,
                          text=True, timeout=540, cwd=REPO)


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    """validate.sh over the base and every overlay: name -> the rendered objects."""
    out = tmp_path_factory.mktemp("k8s")
    done = validate(out=out)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Invalid: 0, Errors: 0, Skipped: 0" in done.stdout, done.stdout
    return {path.stem: [d for d in yaml.safe_load_all(path.read_text()) if d]
            for path in out.glob("*.yaml")}


@claims("`deploy/k8s` (kustomize)", "validated",
        "`kustomize build` of the base and every overlay, each rendered object against the "
        "Kubernetes 1.34 schemas and KEDA 2.21's CRDs, `kubeconform -strict` "
        "(`deploy/k8s/validate.sh`)")
def test_the_base_and_every_overlay_render_and_match_their_schemas(
        rendered: dict[str, list[dict[str, Any]]]) -> None:
    overlays = {p.name for p in (REPO / "deploy" / "k8s" / "overlays").iterdir() if p.is_dir()}
    assert set(rendered) == {"base"} | {f"overlay-{o}" for o in overlays}
    kinds = {obj["kind"] for obj in rendered["base"]}
    assert {"ConfigMap", "Secret", "Deployment", "Service", "ScaledObject",
            "TriggerAuthentication"} <= kinds


def test_unknown_fields_wrong_types_and_unknown_kinds_fail(tmp_path: Path) -> None:
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "widget.yaml").write_text("apiVersion: example.com/v1\nkind: Widget\n"
                                     "metadata: {name: w}\n")
    base = os.path.relpath(REPO / "deploy" / "k8s" / "base", bad)
    (bad / "kustomization.yaml").write_text(yaml.safe_dump({
        "resources": [base, "widget.yaml"],
        "patches": [
            {"target": {"kind": "Deployment", "name": "streams-worker"},
             "patch": "- {op: add, path: /spec/template/spec/containers/0/bogus, value: 1}"},
            {"target": {"kind": "ScaledObject"},
             "patch": "- {op: add, path: /spec/maxReplicas, value: 3}\n"
                      "- {op: replace, path: /spec/pollingInterval, value: soon}"},
        ]}))
    done = validate(bad, out=tmp_path / "out")
    assert done.returncode != 0
    text = done.stdout + done.stderr
    assert "additional properties 'bogus' not allowed" in text, text
    assert "additional properties 'maxReplicas' not allowed" in text, text
    assert "/spec/pollingInterval': got string, want integer" in text, text
    assert "could not find schema for Widget" in text, text
    assert "Invalid: 2, Errors: 1" in text, text


def by_kind(objects: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == kind}


def env_of(objects: list[dict[str, Any]]) -> dict[str, str]:
    """The environment the ConfigMap and Secret give every container."""
    config = next(iter(by_kind(objects, "ConfigMap").values()))["data"]
    secret = next(iter(by_kind(objects, "Secret").values()))
    values = dict(secret.get("stringData", {}))
    values.update({k: base64.b64decode(v).decode() for k, v in secret.get("data", {}).items()})
    return {**config, **values}


def containers(objects: list[dict[str, Any]]) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    for deployment in by_kind(objects, "Deployment").values():
        for container in deployment["spec"]["template"]["spec"]["containers"]:
            yield deployment, container


@claims("`deploy/k8s` (kustomize)", "validated",
        "KEDA's ScaledObject against the worker's group and partitions")
@pytest.mark.parametrize("name", ["base", "overlay-local"])
def test_keda_scales_the_mirror_group_up_to_the_partition_count(
        rendered: dict[str, list[dict[str, Any]]], name: str) -> None:
    objects = rendered[name]
    env = env_of(objects)
    scaled = by_kind(objects, "ScaledObject")["streams-worker"]["spec"]
    worker = by_kind(objects, "Deployment")[scaled["scaleTargetRef"]["name"]]
    args = worker["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[0] == "worker"
    cursor = args[args.index("--cursor") + 1]
    (trigger,) = scaled["triggers"]
    assert trigger["type"] == "kafka"
    # The worker's mirror group is `<prefix>-<cursor>` (streams/runtime/worker/app.py).
    assert trigger["metadata"]["consumerGroup"] == f"{env['STREAMS_TOPIC_PREFIX']}-{cursor}"
    assert trigger["metadata"]["bootstrapServersFromEnv"] == "KAFKA_BOOTSTRAP_SERVERS"
    assert "topic" not in trigger["metadata"]  # every tenant's events topic the group reads
    assert scaled["maxReplicaCount"] == int(env["STREAMS_PARTITIONS"])
    assert "replicas" not in worker["spec"]  # KEDA owns the count
    # SASL as the workers speak it, with their credentials.
    mechanism = env["KAFKA_SASL_MECHANISM"].lower().replace("-sha-", "_sha")
    assert trigger["metadata"]["sasl"] == mechanism
    assert (trigger["metadata"]["tls"] == "enable") == env["KAFKA_SECURITY_PROTOCOL"].endswith(
        "SSL")
    auth = by_kind(objects, "TriggerAuthentication")[trigger["authenticationRef"]["name"]]
    secret_name = next(iter(by_kind(objects, "Secret")))
    refs = {r["parameter"]: (r["name"], r["key"]) for r in auth["spec"]["secretTargetRef"]}
    assert refs == {"username": (secret_name, "KAFKA_SASL_USERNAME"),
                    "password": (secret_name, "KAFKA_SASL_PASSWORD")}


@claims("`deploy/k8s` (kustomize)", "validated",
        "the ConfigMap and Secret make valid `Settings`")
@pytest.mark.parametrize("name", ["base", "overlay-local"])
def test_the_configmap_and_secret_make_valid_settings(
        rendered: dict[str, list[dict[str, Any]]], name: str) -> None:
    env = env_of(rendered[name])
    settings = Settings.from_env(env)
    assert settings.security_protocol.startswith("SASL_")
    assert settings.sasl_username and settings.sasl_password


@claims("`deploy/k8s` (kustomize)", "validated",
        "the registry proxy serves tenants behind its Service and reads the registry the "
        "service's pods read directly, so no pod sends a broker password in plain HTTP")
@pytest.mark.parametrize("name", ["base", "overlay-local"])
def test_the_registry_proxy_serves_tenants_and_the_service_reads_the_registry_itself(
        rendered: dict[str, list[dict[str, Any]]], name: str) -> None:
    objects = rendered[name]
    env = env_of(objects)
    service = by_kind(objects, "Service")["streams-registry"]
    assert service["spec"]["ports"][0]["port"] == int(env["STREAMS_REGISTRY_PROXY_PORT"])
    proxy = by_kind(objects, "Deployment")["streams-registry-proxy"]
    assert service["spec"]["selector"] == proxy["spec"]["selector"]["matchLabels"]
    settings = Settings.from_env(env)
    # The service's pods: the registry itself, not the proxy (their user would send its
    # broker password to the proxy in every request), and no registry credentials of a
    # broker user's.
    assert "streams-registry:" not in settings.schema_registry_url
    assert settings.schema_registry_username != settings.sasl_username
    # The proxy reads that same registry (no upstream of its own in one shared config).
    assert settings.behind_registry_proxy() == settings
    for _deployment, container in containers(objects):
        assert not container.get("env"), "every setting comes from the ConfigMap and Secret"


def test_secrets_are_in_the_secret_and_every_key_is_a_setting(
        rendered: dict[str, list[dict[str, Any]]]) -> None:
    objects = rendered["base"]
    variables = {var.env: var for _, var, _, _ in declared()}
    config = set(next(iter(by_kind(objects, "ConfigMap").values()))["data"])
    secret = set(next(iter(by_kind(objects, "Secret").values()))["stringData"])
    assert config <= set(variables), config - set(variables)
    assert secret <= set(variables)
    secret_vars = {name for name, var in variables.items() if var.secret}
    assert not config & (secret_vars | CREDENTIAL_NAMES)
    assert secret_vars <= secret, secret_vars - secret
    assert secret - secret_vars <= CREDENTIAL_NAMES


@claims("`deploy/k8s` (kustomize)", "validated",
        "every pod non-root, read-only, sized, its probes on the ports the settings name")
@pytest.mark.parametrize("name", ["base", "overlay-local"])
def test_every_pod_is_non_root_read_only_sized_and_probed_on_its_port(
        rendered: dict[str, list[dict[str, Any]]], name: str) -> None:
    objects = rendered[name]
    env = env_of(objects)
    ports = {"serve": int(env["STREAMS_SERVE_PORT"]),
             "registry-proxy": int(env["STREAMS_REGISTRY_PROXY_PORT"])}
    seen = set()
    for deployment, container in containers(objects):
        pod = deployment["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["automountServiceAccountToken"] is False
        ctx = container["securityContext"]
        assert ctx["readOnlyRootFilesystem"] is True
        assert ctx["allowPrivilegeEscalation"] is False
        assert ctx["capabilities"]["drop"] == ["ALL"]
        assert {"/tmp"} <= {m["mountPath"] for m in container["volumeMounts"]}
        for part in ("requests", "limits"):
            assert {"cpu", "memory"} <= set(container["resources"][part])
        assert container["envFrom"] == [{"configMapRef": {"name": "streams-config"}},
                                        {"secretRef": {"name": "streams-credentials"}}]
        declared_ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        command = container["args"][0]
        want = ports.get(command, int(env["STREAMS_HEALTH_PORT"]))
        for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz"),
                            ("startupProbe", "/healthz")):
            get = container[probe]["httpGet"]
            assert get["path"] == path
            assert declared_ports[get["port"]] == want, (deployment["metadata"]["name"], probe)
        seen.add(command)
    assert seen == {"worker", "sink", "serve", "calibration", "registry-proxy"}
    service = by_kind(objects, "Service")["streams-api"]["spec"]
    serve = by_kind(objects, "Deployment")["streams-serve"]["spec"]
    assert service["selector"] == serve["selector"]["matchLabels"]
    assert service["ports"][0]["targetPort"] == "http"

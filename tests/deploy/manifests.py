"""What the deployment files ask of the image: the `streams` commands their containers run.

Read straight from deploy/k8s/base (plain YAML, no kustomize needed) and docker-compose.yml,
so the image tests need neither Docker nor a cluster.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
K8S_BASE = REPO / "deploy" / "k8s" / "base"
COMPOSE = REPO / "docker-compose.yml"
IMAGE = "feedback-streams"


def k8s_objects() -> list[dict[str, Any]]:
    """Every object of the base's resource files, in the kustomization's order."""
    kustomization = yaml.safe_load((K8S_BASE / "kustomization.yaml").read_text())
    objects: list[dict[str, Any]] = []
    for name in kustomization["resources"]:
        objects.extend(d for d in yaml.safe_load_all((K8S_BASE / name).read_text()) if d)
    return objects


def k8s_containers() -> Iterator[tuple[str, dict[str, Any]]]:
    """(Deployment name, container) for every container of the base's Deployments."""
    for obj in k8s_objects():
        if obj["kind"] == "Deployment":
            for container in obj["spec"]["template"]["spec"]["containers"]:
                yield obj["metadata"]["name"], container


def compose() -> dict[str, Any]:
    """docker-compose.yml, parsed."""
    loaded: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    return loaded


def compose_image_services() -> dict[str, dict[str, Any]]:
    """The compose services that run this project's image."""
    return {name: svc for name, svc in compose()["services"].items()
            if "build" in svc or str(svc.get("image", "")).startswith(IMAGE)}


def image_commands() -> dict[str, list[str]]:
    """Where each `streams` command line is used (`k8s:<deployment>`, `compose:<service>`)
    -> its arguments after the entrypoint."""
    found: dict[str, list[str]] = {}
    for deployment, container in k8s_containers():
        assert "command" not in container, f"{deployment}: the entrypoint is the image's"
        found[f"k8s:{deployment}"] = [str(a) for a in container["args"]]
    for name, svc in compose_image_services().items():
        assert "entrypoint" not in svc, f"compose {name}: the entrypoint is the image's"
        found[f"compose:{name}"] = [str(a) for a in svc["command"]]
    return found

"""What each deployment part's tests show, declared on the tests themselves, and the table of
docs/operations.md ("run here / only validated / not checked at all") made from them.

A test that runs a part (builds the image, brings compose up, plays the manifests, kills a
broker) or only validates it (parses, renders, checks a schema) says so with `@claims(part,
"run" | "validated", what)`; the table's cells are those claims, each followed by the test
that makes it. `tests/deploy/test_matrix.py` fails when the docs' table is not this one, so a
test removed, renamed or re-scoped changes the docs with it. Print the table with

    .venv/bin/python -m tests.deploy.matrix

and paste it between the markers in docs/operations.md.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, TypeVar

__all__ = ["PARTS", "Claim", "claims", "table"]

Kind = Literal["run", "validated"]
_F = TypeVar("_F", bound=Callable[..., object])


@dataclass(frozen=True)
class Claim:
    """One test's claim about one part."""

    part: str
    kind: Kind
    text: str
    test: str  # path::name


@dataclass(frozen=True)
class Part:
    """A row: the part, and what no test checks (said plainly, not generated)."""

    name: str
    unchecked: str = ""


PARTS = (
    Part("`Dockerfile`", "the build on `python:3.11-slim-bookworm` itself (its default base: CI "
         "builds on the Debian-made base instead, same Python minor and Debian release); "
         "`docker build` with BuildKit"),
    Part("the commands the manifests and compose run"),
    Part("`deploy/k8s` (kustomize)", "scheduling, Services, probes acting (podman runs health "
         "checks only with systemd), KEDA reading lag, RBAC/PSA admission in a real cluster"),
    Part("`docker-compose.yml`", "`docker compose` itself; the official `apache/kafka` and "
         "`apicurio/apicurio-registry` images; `depends_on` conditions"),
    Part("a three-broker cluster (`STACK_BROKERS=3 deploy/stack.sh start`)",
         "clusters on several machines; a network partition (only process kills and stops)"),
    Part("`streams registry-proxy`", "the proxy in the compose file (its services use the "
         "broker's anonymous listener, so no user to check); TLS in front of it; the "
         "NetworkPolicy that keeps tenants from going around it"),
)

# The modules whose tests carry claims; importing them registers their claims.
MODULES = (
    "tests.deploy.test_container",
    "tests.deploy.test_image",
    "tests.deploy.test_k8s",
    "tests.deploy.test_kube_play",
    "tests.deploy.test_compose",
    "tests.deploy.test_compose_up",
    "tests.faults.test_cluster",
    "tests.integration.test_registry_access",
)

_CLAIMS: dict[tuple[str, str, str], Claim] = {}


def claims(part: str, kind: Kind, text: str) -> Callable[[_F], _F]:
    """Declare that the decorated test runs (or only validates) `part`, showing `text`."""
    if part not in {p.name for p in PARTS}:
        raise ValueError(f"unknown part {part!r}: add it to tests/deploy/matrix.py PARTS")

    def mark(test: _F) -> _F:
        module = test.__module__
        path = module.replace(".", "/") + ".py"
        claim = Claim(part, kind, text, f"{path}::{test.__name__}")
        _CLAIMS[(part, kind, claim.test)] = claim
        return test

    return mark


def _cell(found: list[Claim]) -> str:
    return "; ".join(f"{c.text} (`{c.test}`)" for c in found)


def table() -> str:
    """The markdown table of every part, from the claims of the tests in MODULES."""
    for module in MODULES:
        importlib.import_module(module)
    lines = ["| part | run here | only validated (how) | not checked at all |",
             "|---|---|---|---|"]
    for part in PARTS:
        mine = [c for c in _CLAIMS.values() if c.part == part.name]
        run = _cell([c for c in mine if c.kind == "run"])
        validated = _cell([c for c in mine if c.kind == "validated"])
        lines.append(f"| {part.name} | {run} | {validated} | {part.unchecked} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    # The test modules register with the importable module, not with this __main__ copy.
    print(importlib.import_module("tests.deploy.matrix").table(), end="")

"""Per-tenant topic names: one scheme, `<prefix>.<tenant>.<kind>`.

    fs.acme.events      everything acme's workspaces log (runs, firings, feedback, app events)
    fs.acme.scores      scores for downstream analytics, keyed by feedback event id
    fs.acme.deadletter  records the pipeline could not handle, with the reason
    fs.acme.rules       events matched by stateful rules (counts, rate limits, scopes), one
                        partition, so one decider sees them all in order

A tenant name is lower-case letters, digits and hyphens (1-48, starting with a letter); no
dots, so a topic name parses back into its tenant unambiguously. A workspace name is 1-64
letters, digits, `_`, `.` and `-`, starting with a letter or digit.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from streams.core.errors import ValidationFailed

# Matched with fullmatch: `$` alone would let a trailing newline through.
TENANT_PATTERN = re.compile(r"[a-z][a-z0-9-]{0,47}")
PREFIX_PATTERN = re.compile(r"[a-z][a-z0-9_-]{0,31}")
WORKSPACE_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
KINDS = ("events", "scores", "deadletter", "rules")

__all__ = [
    "KINDS",
    "PREFIX_PATTERN",
    "TENANT_PATTERN",
    "WORKSPACE_PATTERN",
    "TenantTopics",
    "check_tenant",
    "check_workspace",
    "parse_topic",
    "tenant_topics",
]


def check_tenant(name: str) -> str:
    """Return `name` if it is a valid tenant name, else raise ValidationFailed saying why."""
    if not isinstance(name, str) or not TENANT_PATTERN.fullmatch(name):
        raise ValidationFailed(
            f"invalid tenant name {name!r}: use 1-48 lower-case letters, digits and hyphens, "
            f"starting with a letter (pattern {TENANT_PATTERN.pattern})"
        )
    return name


def check_workspace(name: str) -> str:
    """Return `name` if it is a valid workspace name, else raise ValidationFailed saying why."""
    if not isinstance(name, str) or not WORKSPACE_PATTERN.fullmatch(name):
        raise ValidationFailed(
            f"invalid workspace name {name!r}: use 1-64 letters, digits, '_', '.' and '-', "
            f"starting with a letter or digit (pattern {WORKSPACE_PATTERN.pattern})"
        )
    return name


@dataclass(frozen=True)
class TenantTopics:
    """The topics of one tenant."""

    tenant: str
    events: str
    scores: str
    deadletter: str
    rules: str

    def all(self) -> tuple[str, str, str, str]:
        """Events, scores, dead-letter and rules topics."""
        return (self.events, self.scores, self.deadletter, self.rules)


def tenant_topics(tenant: str, prefix: str = "fs") -> TenantTopics:
    """The topic names of a tenant."""
    check_tenant(tenant)
    if not PREFIX_PATTERN.fullmatch(prefix):
        raise ValidationFailed(
            f"invalid topic prefix {prefix!r} (pattern {PREFIX_PATTERN.pattern})")
    return TenantTopics(tenant, f"{prefix}.{tenant}.events", f"{prefix}.{tenant}.scores",
                        f"{prefix}.{tenant}.deadletter", f"{prefix}.{tenant}.rules")


def parse_topic(topic: str, prefix: str = "fs") -> tuple[str, str] | None:
    """(tenant, kind) of a tenant topic name under `prefix`, or None if it is not one."""
    parts = topic.split(".")
    if len(parts) != 3 or parts[0] != prefix or parts[2] not in KINDS:
        return None
    if not TENANT_PATTERN.fullmatch(parts[1]):
        return None
    return parts[1], parts[2]

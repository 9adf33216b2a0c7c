"""Every topic and consumer-group name, and the patterns that match them across tenants: one
scheme, in this one module. Nothing else in the package spells a name (tests/core/
test_tenancy.py holds the package to it), so deployments, manifests and ACLs read here.

Per-tenant topics, `<prefix>.<tenant>.<kind>`:

    fs.acme.events      everything acme's workspaces log (runs, firings, feedback, app events)
    fs.acme.scores      scores for downstream analytics, keyed by feedback event id
    fs.acme.deadletter  records the pipeline could not handle, with the reason
    fs.acme.rules       events matched by stateful rules (counts, rate limits, scopes),
                        keyed by `<rule>|<scope key>`, so one key's matches are in one order
    fs.acme.rulestate   the deciders' changelog: compacted, partitioned like the rules topic,
                        one record per (rule, scope key) and one position per partition
    fs.acme.index       the workspace handle's compacted index (made with the tenant)
    fs.acme.rulebook    installed rules, compacted, keyed by rule name (made on first install)
    fs.acme.redriven    re-drives of dead letters, compacted (made on first re-drive)
    fs.acme.commands    the command ledger: one claim per idempotency key (made on first use)

Process-wide topics: `<prefix>._control` (every worker subscribes to it, so its channel is
never empty before tenants exist), `<prefix>._keys` (the API key store) and
`<prefix>.unrouted.deadletter` (letters of records from no tenant's topic). No tenant name
starts with `_`; `unrouted` is a tenant name nobody should pick.

Consumer groups: the worker's are `<prefix>-<cursor>` (the mirror), `<prefix>-<cursor>-rules`
(the reactor), `<prefix>-<cursor>-app` (Faust's own) and `<prefix>-rule-decider`; a sink
cursor is `<prefix>.sink.<cursor>`, the in-process mirror's `<prefix>.sink.<cursor>.<tenant>.
<workspace>`; group-less readers (which librdkafka still gives a group id) are named in their
topic's tenant's group prefix, `<prefix>.<tenant>.<kind>-<random>`, so a tenant's principal
may read its own topics (streams.core.access grants `<prefix>.<tenant>.`, `<prefix>.` and
`<prefix>-`).

A tenant name is lower-case letters, digits and hyphens (1-48, starting with a letter); no
dots, so a topic name parses back into its tenant unambiguously. A workspace name is 1-64
letters, digits, `_`, `.` and `-`, starting with a letter or digit. Pure: no Kafka here.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from typing import Final

from streams.core.errors import ValidationFailed

# Matched with fullmatch: `$` alone would let a trailing newline through.
TENANT_PATTERN = re.compile(r"[a-z][a-z0-9-]{0,47}")
PREFIX_PATTERN = re.compile(r"[a-z][a-z0-9_-]{0,31}")
WORKSPACE_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
CURSOR_PATTERN = re.compile(r"^[a-z][a-z0-9_-]{0,63}$")

# -- the kinds of a tenant's topics --------------------------------------------------------

EVENTS: Final = "events"
SCORES: Final = "scores"
DEADLETTER: Final = "deadletter"
RULES: Final = "rules"
INDEX: Final = "index"
RULEBOOK: Final = "rulebook"
REDRIVEN: Final = "redriven"
COMMANDS: Final = "commands"
RULESTATE: Final = "rulestate"
QUEUES: Final = "queues"
LEASES: Final = "leases"

KINDS = (EVENTS, SCORES, DEADLETTER, RULES)
"""The kinds `parse_topic` recognizes: the topics every tenant has (TenantTopics.all)."""

TENANT_KINDS = (*KINDS, INDEX, RULEBOOK, REDRIVEN, COMMANDS, RULESTATE, QUEUES, LEASES)
"""Every kind of a tenant's topics, those made on demand included."""

__all__ = [
    "COMMANDS",
    "CURSOR_PATTERN",
    "DEADLETTER",
    "EVENTS",
    "INDEX",
    "KINDS",
    "LEASES",
    "PREFIX_PATTERN",
    "QUEUES",
    "REDRIVEN",
    "RULEBOOK",
    "RULES",
    "RULESTATE",
    "SCORES",
    "TENANT_KINDS",
    "TENANT_PATTERN",
    "WORKSPACE_PATTERN",
    "TenantTopics",
    "check_cursor",
    "check_prefix",
    "check_tenant",
    "check_workspace",
    "commands_topic",
    "control_topic",
    "dead_letter_topic",
    "decider_group",
    "fresh_group",
    "index_topic",
    "keys_topic",
    "parse_topic",
    "reader_group",
    "redriven_topic",
    "replay_group",
    "rulebook_follower_group",
    "rulebook_group",
    "rulebook_tenant",
    "rulebook_topic",
    "rules_catch_up_group",
    "rulestate_reader_group",
    "rulestate_topic",
    "sibling_topic",
    "sink_group",
    "tail_group",
    "tenant_prefix",
    "tenant_topic",
    "tenant_topics",
    "tenants_pattern",
    "topic_kind",
    "transactional_id",
    "unrouted_deadletter_topic",
    "worker_app_group",
    "worker_group",
    "worker_rules_group",
    "workspace_sink_group",
]


# -- names: what is valid --------------------------------------------------------------------

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


def check_prefix(prefix: str) -> str:
    """Return `prefix` if it is a valid topic prefix, else raise ValidationFailed."""
    if not isinstance(prefix, str) or not PREFIX_PATTERN.fullmatch(prefix):
        raise ValidationFailed(
            f"invalid topic prefix {prefix!r} (pattern {PREFIX_PATTERN.pattern})")
    return prefix


def check_cursor(cursor: str) -> str:
    """Return `cursor` if it is a valid sink cursor name, else raise ValidationFailed."""
    if not isinstance(cursor, str) or not CURSOR_PATTERN.match(cursor):
        raise ValidationFailed(f"invalid cursor name {cursor!r} (pattern {CURSOR_PATTERN.pattern})")
    return cursor


# -- per-tenant topics -----------------------------------------------------------------------

def tenant_topic(tenant: str, kind: str, prefix: str = "fs") -> str:
    """A tenant's topic of `kind` (one of TENANT_KINDS): `<prefix>.<tenant>.<kind>`."""
    check_tenant(tenant)
    check_prefix(prefix)
    if kind not in TENANT_KINDS:
        raise ValidationFailed(f"unknown topic kind {kind!r}: the kinds are {list(TENANT_KINDS)}")
    return f"{prefix}.{tenant}.{kind}"


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

    @property
    def index(self) -> str:
        """The tenant's index topic."""
        return sibling_topic(self.events, INDEX)

    @property
    def rulebook(self) -> str:
        """The tenant's rulebook topic."""
        return sibling_topic(self.events, RULEBOOK)

    @property
    def queues(self) -> str:
        """The tenant's annotation queues topic (streams.core.queues)."""
        return sibling_topic(self.events, QUEUES)

    @property
    def leases(self) -> str:
        """The tenant's leases topic: who reviews which queue item (streams.core.leases)."""
        return sibling_topic(self.events, LEASES)

    @property
    def redriven(self) -> str:
        """The tenant's redriven topic."""
        return sibling_topic(self.events, REDRIVEN)

    @property
    def commands(self) -> str:
        """The tenant's command ledger topic."""
        return sibling_topic(self.events, COMMANDS)

    @property
    def rulestate(self) -> str:
        """The tenant's rule state changelog topic."""
        return sibling_topic(self.events, RULESTATE)

    def every(self) -> tuple[str, ...]:
        """Every topic the tenant may have (what deleting it deletes)."""
        return (*self.all(), self.index, self.rulebook, self.commands, self.redriven,
                self.rulestate, self.queues, self.leases)


def tenant_topics(tenant: str, prefix: str = "fs") -> TenantTopics:
    """The topic names of a tenant."""
    return TenantTopics(tenant, *(tenant_topic(tenant, kind, prefix) for kind in KINDS))


def index_topic(tenant: str, prefix: str = "fs") -> str:
    """The name of a tenant's compacted index topic: `<prefix>.<tenant>.index`."""
    return tenant_topic(tenant, INDEX, prefix)


def rulebook_topic(tenant: str, prefix: str = "fs") -> str:
    """The name of a tenant's rulebook topic: `<prefix>.<tenant>.rulebook`."""
    return tenant_topic(tenant, RULEBOOK, prefix)


def commands_topic(tenant: str, prefix: str = "fs") -> str:
    """A tenant's command ledger topic: `<prefix>.<tenant>.commands`."""
    return tenant_topic(tenant, COMMANDS, prefix)


def rulestate_topic(tenant: str, prefix: str = "fs") -> str:
    """A tenant's rule state changelog (compacted, partitioned like its rules topic):
    `<prefix>.<tenant>.rulestate`."""
    return tenant_topic(tenant, RULESTATE, prefix)


def topic_kind(topic: str) -> str | None:
    """The kind of a tenant topic name (its last dotted part, one of TENANT_KINDS), or None."""
    parts = topic.split(".")
    return parts[2] if len(parts) == 3 and parts[2] in TENANT_KINDS else None


def sibling_topic(topic: str, kind: str) -> str:
    """The topic of `kind` of the same tenant (and prefix) as the tenant topic `topic`."""
    if topic_kind(topic) is None or kind not in TENANT_KINDS:
        raise ValidationFailed(f"{topic} is not a tenant topic, or {kind!r} is no topic kind")
    return topic.rsplit(".", 1)[0] + "." + kind


def redriven_topic(deadletter_topic: str) -> str:
    """The compacted topic recording re-drives of a tenant's letters: `<prefix>.<tenant>.
    redriven` beside `<prefix>.<tenant>.deadletter`."""
    if topic_kind(deadletter_topic) != DEADLETTER:
        raise ValidationFailed(f"{deadletter_topic} is not a dead-letter topic")
    return sibling_topic(deadletter_topic, REDRIVEN)


def parse_topic(topic: str, prefix: str = "fs") -> tuple[str, str] | None:
    """(tenant, kind) of a tenant topic name under `prefix` (a kind of KINDS), or None if it
    is not one."""
    parts = topic.split(".")
    if len(parts) != 3 or parts[0] != prefix or parts[2] not in KINDS:
        return None
    if not TENANT_PATTERN.fullmatch(parts[1]):
        return None
    return parts[1], parts[2]


def rulebook_tenant(topic: str, prefix: str = "fs") -> str | None:
    """The tenant whose rulebook `topic` is, or None when it is not a rulebook topic."""
    parts = topic.split(".")
    if len(parts) != 3 or parts[0] != prefix or parts[2] != RULEBOOK \
            or not TENANT_PATTERN.fullmatch(parts[1]):
        return None
    return parts[1]


def tenant_prefix(tenant: str, prefix: str = "fs") -> str:
    """The name prefix of a tenant's topics and consumer groups: `<prefix>.<tenant>.`."""
    check_tenant(tenant)
    return f"{prefix}.{tenant}."


# -- process-wide topics -----------------------------------------------------------------------

def control_topic(prefix: str = "fs") -> str:
    """A topic every worker subscribes to, so its channel is never empty before tenants
    exist: `<prefix>._control`."""
    return f"{check_prefix(prefix)}._control"


def keys_topic(prefix: str = "fs") -> str:
    """The key store's topic: `<prefix>._keys` (no tenant name starts with `_`)."""
    return f"{check_prefix(prefix)}._keys"


def unrouted_deadletter_topic(prefix: str = "fs") -> str:
    """Where letters of records from no tenant's topic go: `<prefix>.unrouted.deadletter`."""
    return f"{check_prefix(prefix)}.unrouted.{DEADLETTER}"


def dead_letter_topic(prefix: str, topic: str) -> str:
    """The dead-letter topic for a record of `topic`: its tenant's, or
    `<prefix>.unrouted.deadletter` when `topic` is no tenant's."""
    parsed = parse_topic(topic, prefix)
    return tenant_topics(parsed[0], prefix).deadletter if parsed else \
        unrouted_deadletter_topic(prefix)


# -- consumer groups ---------------------------------------------------------------------------

def worker_group(cursor: str, prefix: str = "fs") -> str:
    """The worker mirror's group: `<prefix>-<cursor>` (fs-feedback-mirror; KEDA scales on it)."""
    return f"{prefix}-{cursor}"


def worker_rules_group(cursor: str, prefix: str = "fs") -> str:
    """The worker reactor's group: `<prefix>-<cursor>-rules`."""
    return f"{worker_group(cursor, prefix)}-rules"


def worker_app_group(cursor: str, prefix: str = "fs") -> str:
    """The group (and Faust app id) of the worker's Faust app: `<prefix>-<cursor>-app`."""
    return f"{worker_group(cursor, prefix)}-app"


def decider_group(prefix: str = "fs") -> str:
    """The stateful rules' decider group: `<prefix>-rule-decider`."""
    return f"{prefix}-rule-decider"


def replay_group(rules_topic: str) -> str:
    """The group id of the reader a decider replays a rules topic with: `<topic>.rebuild`
    (in the tenant's group prefix)."""
    return f"{rules_topic}.rebuild"


def rulestate_reader_group(rulestate: str) -> str:
    """The group id of the reader a decider restores rule state with: `<topic>.restore`
    (in the tenant's group prefix)."""
    return f"{rulestate}.restore"


def rulebook_group(prefix: str = "fs") -> str:
    """The reader of a backfill (`streams rules install --backfill`): `<prefix>-rulebook`."""
    return f"{prefix}-{RULEBOOK}"


def rulebook_follower_group(prefix: str = "fs") -> str:
    """The worker's reader of every tenant's rulebook: `<prefix>-rulebook-follower`."""
    return f"{rulebook_group(prefix)}-follower"


def rules_catch_up_group(prefix: str = "fs") -> str:
    """The reactor's reader catching a newly live rule up: `<prefix>-rules-catch-up`."""
    return f"{prefix}-{RULES}-catch-up"


def sink_group(cursor: str | None, prefix: str = "fs") -> str:
    """The consumer group of a sink cursor, `<prefix>.sink.<cursor>`: its committed offsets
    are the cursor. None (no cursor) gives a fresh group nobody shares,
    `<prefix>.sink-nocursor.<random>`, whose offsets are never committed."""
    if cursor is None:
        return f"{prefix}.sink-nocursor.{uuid.uuid4().hex}"
    return f"{prefix}.sink.{check_cursor(cursor)}"


def workspace_sink_group(cursor: str, tenant: str, workspace: str, prefix: str = "fs") -> str:
    """The in-process mirror's cursor of one workspace, `<prefix>.sink.<cursor>.<tenant>.
    <workspace>`: one cursor name in two workspaces is two cursors."""
    return f"{sink_group(cursor, prefix)}.{tenant}.{workspace}"


def reader_group(topic: str, kind: str, prefix: str = "fs") -> str:
    """A fresh group id for a reader of `topic` (librdkafka wants one even for a consumer
    that only assigns partitions, and looks its coordinator up, which the broker authorizes):
    in the topic's tenant's group prefix, `<prefix>.<tenant>.<kind>-<random>`, so a tenant's
    principal may read its own topics; `streams-<kind>-<random>` for other topics."""
    parts = topic.split(".")
    if len(parts) == 3 and parts[0] == prefix and TENANT_PATTERN.fullmatch(parts[1]):
        return f"{prefix}.{parts[1]}.{kind}-{uuid.uuid4().hex}"
    return f"streams-{kind}-{uuid.uuid4().hex}"


def fresh_group(kind: str) -> str:
    """A fresh group id for a one-off reader outside any tenant's group prefix:
    `<kind>_<random>` (the report's reader, `report_...`; the demo's view, `demo-watch_...`)."""
    return f"{kind}_{uuid.uuid4().hex}"


def transactional_id(group: str, instance: str | None = None) -> str:
    """The transactional.id of one exactly-once producer of a loop in `group`:
    `<group>.txn.<instance>` (`instance` default: a fresh random one per producer). Fencing of
    a zombie follows the consumer group's generation (KIP-447: the offsets go into the
    transaction with the group's metadata), so the id needs to be unique per live producer,
    not stable across restarts; its group prefix is the loop's, so the worker's ACLs on
    `<prefix>-` cover it."""
    return f"{group}.txn.{instance or uuid.uuid4().hex}"


def tail_group() -> str:
    """A fresh group id for a live tail (of a workspace's events, of a compacted topic):
    `streams-tail-<random>`."""
    return f"streams-tail-{uuid.uuid4().hex}"


# -- cross-tenant patterns ---------------------------------------------------------------------

def tenants_pattern(kind: str, prefix: str = "fs") -> str:
    """The pattern subscription (librdkafka's `^regex`) of every tenant's topic of `kind`
    under `prefix`, tenants created later included."""
    if kind not in TENANT_KINDS:
        raise ValidationFailed(f"unknown topic kind {kind!r}: the kinds are {list(TENANT_KINDS)}")
    return f"^{re.escape(prefix)}\\.[a-z][a-z0-9-]*\\.{kind}$"

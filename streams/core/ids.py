"""Every id and key the project derives, in one place.

Ids of firings, runs, their events and scores are derived from the rule and the event that
caused them, never random, so a decision repeated after a crash, or a replay of the log,
writes the same ids again and readers can tell a repeat from a new run. Their values are
part of the log's contract: changing a derivation here changes what a replay writes
(tests/core/test_ids.py pins them). The state keys of counts and rate limits and the scope
key are derived the same way, so every worker computes the same keys from the same events.

`new_id` is the one random id: it names events that start something (an appended event,
a reader's consumer group), where a repeat is not possible.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Mapping
from typing import Final
from urllib.parse import urlencode

__all__ = [
    "SCORE_ID_NAMESPACE",
    "command_event_id",
    "count_key",
    "fired_event_id",
    "firing_id",
    "new_id",
    "outcome_event_id",
    "rate_key",
    "run_id_of",
    "sample_point",
    "scope_key",
    "score_id",
    "started_event_id",
    "verdict_event_id",
]

SCORE_ID_NAMESPACE: Final = uuid.UUID("5b1e4c52-2f43-4f6b-9a51-6c1b1e0f5a11")
"""Fixed namespace: score ids are uuid5(namespace, "<feedback event id>/<score name>") forever."""

_NAMESPACE_BYTES: Final = SCORE_ID_NAMESPACE.bytes


def new_id(prefix: str) -> str:
    """A fresh random id such as `evt_3f2a...`; prefixes make ids readable in logs."""
    return f"{prefix}_{uuid.uuid4().hex}"


def _digest(text: str, size: int = 32) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:size]


def scope_key(values: Mapping[str, str]) -> str:
    """The key of a rule's scope values: url-encoded in name order (`service=api`).

    Sorted, so the same values give the same key whatever order the scope was declared in;
    url-encoded, so no value can forge a separator (`&`, `=`, or the `|` of state keys).
    """
    return urlencode(sorted(values.items()))


def count_key(rule: str, scope: str | None) -> str:
    """The state key of a rule's count: `rule` or `rule|scope`."""
    return rule if scope is None else f"{rule}|{scope}"


def rate_key(rule: str, scope: str | None, window: int) -> str:
    """The state key of a rule's rate counter: `rule|window` or `rule|window|scope`."""
    base = f"{rule}|{window}"
    return base if scope is None else f"{base}|{scope}"


def sample_point(rule: str, event_id: str) -> float:
    """Where an event falls in [0, 1) for a rule's sampling; the same inputs, the same point.

    Salted with the rule's name so that two rules sampling 10% do not pick the same events.
    """
    digest = hashlib.sha256(f"{rule}\n{event_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def firing_id(rule: str, causation_id: str) -> str:
    """A firing's id, derived from its rule and the event that made it fire.

    Derived, not random, so an event delivered twice or replayed gives the same firing and
    the Kafka layer can drop the repeat.
    """
    return "fir_" + _digest(f"{rule}\n{causation_id}")


def run_id_of(firing: str) -> str:
    """The id of the run a firing starts."""
    return f"run_{_digest(firing + ':run', 24)}"


def fired_event_id(firing: str) -> str:
    """The event id of a firing's `rule_fired`."""
    return f"evt_{_digest(firing)}"


def throttled_event_id(firing: str) -> str:
    """The event id of the throttle record of a firing its rule's rate limit held back (the
    firing id it would have had)."""
    return f"evt_{_digest(firing + ':throttled')}"


def started_event_id(run_id: str) -> str:
    """The event id of a run's `run_started`."""
    return f"evt_{_digest(run_id + ':started')}"


def outcome_event_id(run_id: str, kind: str, attempt: int) -> str:
    """The event id of a run's lifecycle event `kind` (`succeeded`, `failed`, `retried`,
    `dead_lettered`) after attempt number `attempt`."""
    return f"evt_{_digest(f'{run_id}:{kind}:{attempt}')}"


_VARIANT = "89ab"


def score_id(feedback_event_id: str, score_name: str) -> str:
    """The deterministic id of a feedback event's score of that name: the RFC 4122 version 5
    UUID of `"<feedback event id>/<score name>"` in SCORE_ID_NAMESPACE (the same string as
    `uuid.uuid5` gives, computed without building UUID objects on the hot path)."""
    digest = hashlib.sha1(
        _NAMESPACE_BYTES + f"{feedback_event_id}/{score_name}".encode()).digest()
    h = digest.hex()
    # The version nibble (5) and the variant's two bits (10) set in the text itself: the
    # variant's hex digit is 8 + the two bits below them (the byte copy this replaced cost
    # 0.3 µs a score on the mirror's path).
    return f"{h[:8]}-{h[8:12]}-5{h[13:16]}-{_VARIANT[digest[8] >> 4 & 3]}{h[17:20]}-{h[20:32]}"


def command_event_id(tenant: str, workspace: str, participant: str, command_id: str) -> str:
    """The event id of the feedback a command records: derived from who sent which command
    id where, so every attempt of one command (a retry, another server process) names the
    same event and a lost answer can be recovered from the log."""
    return "evt_" + _digest(f"cmd\n{tenant}\n{workspace}\n{participant}\n{command_id}")


def verdict_event_id(workspace: str, verdict_key: str, *, on: str | None = None) -> str:
    """The event id of the record of an evaluator's verdict on one input in `workspace`
    (`streams.core.evaluation.verdict_key`): derived, so whoever judges that input again (a
    retried attempt, a refire, a backfill) finds the record by its id and pays no model call.
    `on` (a target's `kind:id`): the record of that verdict on another target than the one
    it was first recorded on (a shadow version's reused verdict)."""
    if on is None:
        return "evt_" + _digest(f"verdict\n{workspace}\n{verdict_key}")
    return "evt_" + _digest(f"verdict\n{workspace}\n{verdict_key}\n{on}")


def alarm_event_id(workspace: str, evaluator: str, feedback_type: str, field: str,
                   episode: int, raised: bool) -> str:
    """The event id of a calibration alarm's raise or clear: derived from what it is about
    and its episode (the how-manieth raise), so two keepers writing the same change write
    the same id."""
    return "evt_" + _digest(f"calibration\n{workspace}\n{evaluator}\n{feedback_type}\n"
                            f"{field}\n{episode}\n{'raised' if raised else 'cleared'}")

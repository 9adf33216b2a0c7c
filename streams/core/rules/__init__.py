"""Rules: declarative triggers on a workspace's events, and the actions they run.

    wrong_triage = Rule(
        name="ops:wrong-triage",
        when=on(FeedbackGiven).where(F.value.correct.eq(False), feedback_type="triage_quality"),
        then=run("escalate"),
    )
    spike = Rule(
        name="ops:error-spike",
        when=on("ops:error_spike").count(3, within=timedelta(minutes=5)).scope(F.data.service),
        then=run("triage", retry=RetryPolicy(max_attempts=3, backoff=timedelta(seconds=1))),
    )

A trigger names the events it watches (`on`), filters them (`where`, `sample`), and may count
them (`count`), throttle its firings (`at_most`) and give them a scope key (`scope`). An event
passes through those steps in that order, whatever order the trigger was written in: filters
and sampling first, then counting, then the rate limit.

Everything here is pure: matching reads only the envelope, and the stateful steps (counts
and rate limits) keep their state in explicit values (`CountWindow`, `RateWindow`) that
`RuleState` holds in memory for tests and offline replays, and that the Kafka layer keeps in
tables under `count_key` and `rate_key`. Every decision depends on event time and event
ids only, never on the wall clock, so a replay decides what the live run decided.

The package splits by concept: `predicates` (paths and predicates), `triggers` (triggers,
counts, rate limits, scopes), `chains` (completion: judging a chain when it ends), `engine`
(rules, rule sets, state, decisions), `actions` (actions and retry policies), `checks`
(`InvalidRule`); derived ids and keys (`firing_id`,
`sample_point`, `count_key`, `rate_key`) live in `streams.core.ids`. Everything public is
importable from here.

An event type a rule watches is a built-in one or a declared app event type
(`streams.core.app_events`): `on()` refuses a name no type can have, and
`RuleSet.check_event_types()` (called by the worker) a namespaced name nothing declared.
"""

from __future__ import annotations

from streams.core.ids import count_key, firing_id, rate_key, sample_point
from streams.core.rules.actions import Action, NamedAction, RetryPolicy, run
from streams.core.rules.chains import ChainWindow, Completion
from streams.core.rules.checks import InvalidRule
from streams.core.rules.engine import (
    Decision,
    Fire,
    Rule,
    RuleEngine,
    RuleSet,
    RuleState,
    Throttled,
    chain_due,
    evaluate,
)
from streams.core.rules.predicates import (
    ENVELOPE_NAMES,
    MISSING,
    F,
    Path,
    Predicate,
    PredicateLike,
    all_of,
    any_of,
    not_,
)
from streams.core.rules.serialized import (
    RULE_SCHEMA,
    parse_rule,
    rule_from_dict,
    rule_to_dict,
    rule_to_json,
)
from streams.core.rules.triggers import (
    Count,
    CountState,
    CountWindow,
    RateLimit,
    RateState,
    RateWindow,
    Scope,
    Trigger,
    on,
)

__all__ = [
    "ENVELOPE_NAMES",
    "MISSING",
    "RULE_SCHEMA",
    "Action",
    "ChainWindow",
    "Completion",
    "Count",
    "CountState",
    "CountWindow",
    "Decision",
    "F",
    "Fire",
    "InvalidRule",
    "NamedAction",
    "Path",
    "Predicate",
    "PredicateLike",
    "RateLimit",
    "RateState",
    "RateWindow",
    "RetryPolicy",
    "Rule",
    "RuleEngine",
    "RuleSet",
    "RuleState",
    "Scope",
    "Throttled",
    "Trigger",
    "all_of",
    "any_of",
    "chain_due",
    "count_key",
    "evaluate",
    "firing_id",
    "not_",
    "on",
    "parse_rule",
    "rate_key",
    "rule_from_dict",
    "rule_to_dict",
    "rule_to_json",
    "run",
    "sample_point",
]

"""Installed rules (rules as data): the rulebook's entries, which rules are live for a tenant
and from where, the checks of an install, and a backfill's firings.

The record of an install is its `rule_installed` fact in the tenant's log (with the rule's
JSON form and its installation point); an archive's is `rule_archived`. Workers find the live
rules in the tenant's **rulebook**, `<prefix>.<tenant>.rulebook`: a compacted one-partition
topic keyed by rule name whose newest entry per rule says whether it is installed or
archived, so a worker reads one small topic at start and follows it, never the log.

The installation point is, per partition of the tenant's events topic, the offset its end had
when the rule was installed (`start`): an event at or past it is live for the rule, one before
it is history, which only `--backfill` replays. Offsets, not clocks, so no producer's clock
decides what a rule sees. Pure: no Kafka here.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any, Literal

from streams.core.app_events import AppEventTypes
from streams.core.budgets import Budget, backfill_budget
from streams.core.errors import ValidationFailed
from streams.core.events import Envelope, Seq
from streams.core.rules import Fire, InvalidRule, Rule, RuleEngine, rule_from_dict

__all__ = [
    "LiveRule",
    "RulebookEntry",
    "backfill_firings",
    "check_install",
    "history_before",
    "live_rules",
]

@dataclass(frozen=True)
class RulebookEntry:
    """The newest word on one installed rule: its definition (JSON form), where it went live,
    who installed it from which draft, and whether it has been archived since."""

    rule: str
    state: Literal["installed", "archived"]
    definition: dict[str, Any]
    start: dict[int, int]
    workspace: str
    installed_event_id: str
    installed_at: datetime
    installed_by: str
    artifact_id: str | None = None
    archived_event_id: str | None = None
    archived_at: datetime | None = None
    archived_by: str | None = None
    backfill_tokens: int | None = None

    def __post_init__(self) -> None:
        if self.backfill_tokens is not None:
            backfill_budget(self.rule, self.backfill_tokens)  # ValidationFailed naming it

    @property
    def backfill_budget(self) -> Budget | None:
        """The budget of the rule's backfill runs (`install --backfill --budget-tokens`), or
        None: its backfill runs claim from what their action carries, as live runs do."""
        if self.backfill_tokens is None:
            return None
        return backfill_budget(self.rule, self.backfill_tokens)

    def budget_of(self, cause: Envelope | None) -> Budget | None:
        """The budget a run of this rule claims from instead of its action's, given the
        event that made the rule fire: the backfill budget for a run caused by an event
        before the installation point (a backfill's), None for a live one. A cause not found
        counts as history while the rule has a backfill budget: a backfill run must never
        claim past it, and a live run wrongly counted there can only judge less."""
        budget = self.backfill_budget
        return budget if budget is not None and self.is_history(cause) else None

    def is_history(self, cause: Envelope | None) -> bool:
        """Whether a run caused by `cause` is a backfill's: its cause before the
        installation point, or not found (None, or not read from the log)."""
        return cause is None or cause.seq is None or not self.is_live_at(cause.seq)

    @property
    def live(self) -> bool:
        """Installed and not archived since."""
        return self.state == "installed"

    def is_live_at(self, seq: Seq | None) -> bool:
        """Whether an event at `seq` is at or past the installation point. A partition the
        topic did not have at install is all past it; an envelope not read from the log (no
        seq) is taken as new."""
        if seq is None:
            return True
        start = self.start.get(seq.partition)
        return start is None or seq.offset >= start

    def encode(self) -> bytes:
        """The entry as the rulebook record's value (JSON)."""
        raw = asdict(self)
        raw["start"] = {str(p): o for p, o in self.start.items()}
        for name in ("installed_at", "archived_at"):
            value = getattr(self, name)
            raw[name] = value.isoformat() if value is not None else None
        return json.dumps(raw, sort_keys=True, separators=(",", ":")).encode()

    @staticmethod
    def decode(data: bytes) -> RulebookEntry:
        """An entry from a rulebook record's value; ValidationFailed saying what is wrong."""
        try:
            raw = json.loads(data)
            archived_at = raw.get("archived_at")
            return RulebookEntry(
                rule=str(raw["rule"]), state=raw["state"], definition=dict(raw["definition"]),
                start={int(p): int(o) for p, o in raw["start"].items()},
                workspace=str(raw["workspace"]),
                installed_event_id=str(raw["installed_event_id"]),
                installed_at=datetime.fromisoformat(raw["installed_at"]),
                installed_by=str(raw["installed_by"]), artifact_id=raw.get("artifact_id"),
                archived_event_id=raw.get("archived_event_id"),
                archived_at=datetime.fromisoformat(archived_at) if archived_at else None,
                archived_by=raw.get("archived_by"), backfill_tokens=raw.get("backfill_tokens"))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ValidationFailed(f"a rulebook record that is not an entry ({exc!r}); "
                                   f"rulebook records are written by `streams rules install`"
                                   ) from exc


@dataclass(frozen=True)
class LiveRule:
    """A live rule of a tenant: the rule and the entry that installed it."""

    rule: Rule
    entry: RulebookEntry = field(compare=False)

    def is_live_at(self, seq: Seq | None) -> bool:
        """Whether an event at `seq` is past the rule's installation point."""
        return self.entry.is_live_at(seq)


def live_rules(
    entries: Iterable[RulebookEntry],
    *,
    reserved: Collection[str] = (),
    types: AppEventTypes | None = None,
) -> tuple[dict[str, LiveRule], dict[str, str]]:
    """The live rules of a tenant's entries, by name (with the rules of their backfill
    budgets: streams.core.budgets), and the entries refused, by name, with the reason: a
    definition this process cannot build (an app event type it has not declared, a schema
    it does not know), or a name of a rule it already has from its rules modules
    (`reserved`)."""
    live: dict[str, LiveRule] = {}
    refused: dict[str, str] = {}
    for entry in entries:
        budget = entry.backfill_budget
        if budget is not None:
            # Its claims are decided by its rule, archived or not: a backfill's runs may
            # still be running after an archive, and each waits for its claim's answer.
            live[budget.rule_name] = LiveRule(budget.rule, entry)
        if not entry.live:
            continue
        if entry.rule in reserved:
            refused[entry.rule] = (f"a rule of this worker's --rules modules is called "
                                   f"{entry.rule!r}; archive the installed one")
            continue
        try:
            rule = rule_from_dict(entry.definition, types=types)
        except InvalidRule as exc:
            refused[entry.rule] = str(exc)
            continue
        if rule.name != entry.rule:
            refused[entry.rule] = f"its definition names another rule, {rule.name!r}"
            continue
        live[rule.name] = LiveRule(rule, entry)
    return live, refused


def check_install(
    definition: object,
    *,
    actions: Collection[str],
    module_rules: Collection[str] = (),
    installed: Mapping[str, RulebookEntry] | None = None,
    types: AppEventTypes | None = None,
) -> tuple[Rule, bool]:
    """The rule to install, and whether it is live already with this very definition (an
    install to repeat, doing nothing). Refused with InvalidRule: a definition that does not
    validate, an unknown event type, an action not in `actions` (the registry of the rules
    modules the workers load), a name a rules module uses, a name live with another
    definition."""
    rule = rule_from_dict(definition, actions=actions, types=types)
    assert isinstance(definition, dict)  # the schema wants an object
    if rule.name in module_rules:
        raise InvalidRule(f"a rule of the --rules modules is called {rule.name!r}; give the "
                          f"installed rule another name")
    current = (installed or {}).get(rule.name)
    if current is not None and current.live:
        if current.definition == definition:
            return rule, True
        raise InvalidRule(f"rule {rule.name!r} is installed with another definition; archive "
                          f"it first (streams rules archive {rule.name}) or give this one "
                          f"another name")
    return rule, False


def history_before(envelopes: Iterable[Envelope], start: Mapping[int, int]) -> list[Envelope]:
    """The envelopes before an installation point, in the order a backfill decides them:
    event time, then partition and offset (so a replay decides the same again)."""
    before = [e for e in envelopes if e.seq is not None
              and e.seq.partition in start and e.seq.offset < start[e.seq.partition]]
    return sorted(before, key=lambda e: (e.time, e.seq.partition if e.seq else 0,
                                         e.seq.offset if e.seq else 0))


def backfill_firings(rule: Rule, history: Iterable[Envelope],
                     fired: Collection[str]) -> list[tuple[Fire, Envelope]]:
    """The firings of `rule` over `history` (in order: see `history_before`) whose firing
    ids are not in `fired` (the firing ids the log has), each with the event that caused it.
    Ids are derived from the rule and the causing event, so a backfill run again finds its
    firings in `fired` and returns nothing."""
    engine = RuleEngine([rule])
    out: list[tuple[Fire, Envelope]] = []
    # A completion rule's quiet periods pass on the history's event time, as a decider's
    # clock moves on the events its rules watch: a quiet end's cause is the chain's event
    # the firing names, found among the history's.
    when = rule.when
    watched: dict[str, Envelope] = {}
    clock: datetime | None = None

    def ended() -> None:
        if clock is not None:
            out.extend((fire, watched[fire.causation_id]) for fire in engine.due(clock)
                       if fire.firing_id not in fired)

    for envelope in history:
        if when.completion is not None and (when.watches(envelope) or when.ends_chain(envelope)):
            watched[envelope.event_id] = envelope
            if clock is None or envelope.time > clock:
                clock = envelope.time
                ended()
        for decision in engine.evaluate(envelope):
            if isinstance(decision, Fire) and decision.firing_id not in fired:
                out.append((decision, envelope))
        ended()
    return out

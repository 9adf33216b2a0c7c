"""Evaluators as rule actions, and reading runs and chains back from the log.

    judge = EvaluatorAction(triage_judge, input=judged_input, target=judged_run)
    judge_triage = Rule(
        name="ops:judge-triage",
        when=on(RunSucceeded).where(rule="ops:error-spike").at_most(20, per=timedelta(hours=1)),
        then=run(judge),
    )
    ACTIONS = {judge.name: judge}

When its rule fires, the action builds the evaluator's input and the feedback's target with
async functions of the reaction (they usually read the log, through `run_record` and
`chain_events`), runs the evaluator, and gives the verdict as feedback from the evaluator's
actor (its name and version). The run's output is the verdict (value, evaluator, version,
confidence, latency, trace) with the feedback's seq and id; an evaluator that hands off
records nothing and its run's output is `{"handed_off": name}`. Any other error is a failed
attempt, retried and dead-lettered by the rule's policy like any action's.

Verdicts are paid once. Each verdict is recorded before it is given, as an app event
`streams:verdict` in the run's chain whose event id derives from the workspace and the
verdict's key (`verdict_key`: the evaluator's name and version and a digest of the judged
input). Before calling the evaluator the action looks that id up (the workspace handle's
index, `Workspace.event`); when a record is there (a retried attempt after the verdict was
recorded, a refire or replay of the rule, a backfill over history, or another run judging the
same input) its verdict is given again and the evaluator is not called: the run's output says
`"reused": true`. A new version of an evaluator has new keys and judges afresh. Inputs should
be plain data (pydantic models, dataclasses, dicts, lists, strings, numbers): the key is a
digest of their canonical JSON, and an object without one (a default repr) never matches.
`EvaluatorAction(..., reuse=False)` turns it off for a judge whose every call must be fresh.

A shadow version. `EvaluatorAction(current, ..., shadow=candidate, shadow_share=0.25)` also
judges, after the current version's verdict is given, the same input with the candidate, on
exactly the inputs the current version judged (the rule's sampling decided those) or a
deterministic share of them (by the input's digest, so every worker, retry and replay picks
the same ones). The candidate's verdict is only recorded (`streams:verdict` with `"shadow":
true` and the target), never given as feedback: no rule reacts to it and no score is
mirrored for it, while the measures count it as its version's verdict on that target (judge
agreement, answers, trends) and the run's output carries it under `"shadow"` (the report's
cost per version). Reused for another target (the same input judged again for another run),
it is recorded on that target too, without a call. A candidate that hands off or fails is
noted in the output and never fails the run. Promoting it (making it the action's evaluator)
reuses every shadow verdict it recorded: its keys are the same.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, Generic, TypeVar

from pydantic import BaseModel

from streams.core.budgets import BUDGET_CLAIM, Budget, micros_of
from streams.core.errors import IndexBehind, NotFound, ValidationFailed
from streams.core.evaluators import Evaluator, HandOff, Verdict, check_verdict
from streams.core.events import AppEvent, Envelope
from streams.core.feedback import Feedback
from streams.core.ids import verdict_event_id
from streams.core.keyed import KeyedLocks
from streams.core.prices import ModelPrice
from streams.core.runs import ActingWorkspace, Reaction, RunRecord, run_record_of
from streams.core.targets import ChainTarget, FiringTarget, RunTarget

__all__ = ["VERDICT_RECORD", "EvaluatorAction", "chain_events", "promoted_name",
           "recorded_verdict", "run_record", "verdict_key", "with_promotions"]

In = TypeVar("In")

Target = RunTarget | FiringTarget | ChainTarget

VERDICT_RECORD: Final = "streams:verdict"
"""The app event name of a verdict's record (its data: `key` and the verdict's `as_output`)."""


async def run_record(workspace: ActingWorkspace, run_id: str) -> RunRecord:
    """A run, the envelopes that made its rule fire (`matched`) and what it emitted."""
    own = getattr(workspace, "run_record", None)
    if own is not None:  # the workspace handle reads just the run's chain
        found: RunRecord = await own(run_id)
        return found
    record = run_record_of(await workspace.read(), run_id)
    if record is None:
        raise NotFound(f"no run {run_id!r} in workspace {workspace.tenant}/"
                       f"{workspace.workspace}")
    return record


async def chain_events(workspace: ActingWorkspace, correlation_id: str) -> list[Envelope]:
    """Every envelope of a causal chain, in log order."""
    own = getattr(workspace, "chain_events", None)
    if own is not None:  # the workspace handle reads just the chain
        found: list[Envelope] = await own(correlation_id)
        return found
    return [e for e in await workspace.read() if e.correlation_id == correlation_id]


def _plain(judged: object) -> object:
    if isinstance(judged, BaseModel):
        return judged.model_dump(mode="json")
    if dataclasses.is_dataclass(judged) and not isinstance(judged, type):
        return dataclasses.asdict(judged)
    return judged


def verdict_key(evaluator: Evaluator[Any, Any], judged: object) -> str:
    """`<name>@<version>:<sha256>` of an evaluator's verdict on `judged`: the digest of the
    input's canonical JSON (sorted keys; a value JSON cannot hold written as its `str`), so
    the same input gives the same key in every process and a new version a new one."""
    canonical = json.dumps(_plain(judged), sort_keys=True, separators=(",", ":"),
                           ensure_ascii=False, default=str)
    digest = hashlib.sha256(canonical.encode()).hexdigest()
    return f"{evaluator.name}@{evaluator.version}:{digest}"


async def recorded_verdict(workspace: ActingWorkspace, key: str) -> Mapping[str, Any] | None:
    """The record of the verdict under `key` in `workspace` (its data), or None: found by
    its derived event id through the handle's index (`event`), else by reading the log. An
    index too far behind to catch up (a backlog) answers None: the input is judged again
    rather than the run failing, and only a verdict recorded in that unindexed tail is paid
    twice."""
    found = await _event_of(workspace, verdict_event_id(workspace.workspace, key))
    if found is None:
        return None
    event = found.event
    if isinstance(event, AppEvent) and event.name == VERDICT_RECORD \
            and event.data.get("key") == key:
        return event.data
    return None


def _verdict_of(record: Mapping[str, Any], verdict_type: type[Feedback]
                ) -> Verdict[Feedback] | None:
    """The verdict a record holds, or None when it no longer validates (the feedback type
    changed since): then the input is judged again."""
    try:
        return Verdict(verdict_type.model_validate(record["value"]),
                       evaluator=str(record["evaluator"]), version=str(record["version"]),
                       confidence=record.get("confidence"),
                       latency_ms=float(record.get("latency_ms") or 0.0),
                       trace=record.get("trace"))
    except (KeyError, TypeError, ValueError):  # pydantic's ValidationError is a ValueError
        return None


class EvaluatorAction(Generic[In]):
    """An action that runs an evaluator and gives its verdict as feedback."""

    def __init__(
        self,
        evaluator: Evaluator[In, Any],
        *,
        input: Callable[[Reaction], Awaitable[In]],
        target: Callable[[Reaction], Awaitable[Target]],
        name: str | None = None,
        reuse: bool = True,
        shadow: Evaluator[In, Any] | None = None,
        shadow_share: float = 1.0,
        budget: Budget | None = None,
        cost: int | Callable[[In], int] | None = None,
        model: str | None = None,
    ) -> None:
        if not 0.0 < shadow_share <= 1.0:
            raise ValueError(f"shadow_share is the share of judged inputs the shadow judges "
                             f"too, in (0, 1], got {shadow_share!r}")
        if shadow is not None and (shadow.name, shadow.version) == (evaluator.name,
                                                                     evaluator.version):
            raise ValueError(f"the shadow of {evaluator.name}@{evaluator.version} must be "
                             "another evaluator version (its verdicts are its own participant)")
        self.evaluator = evaluator
        self.input = input
        self.target = target
        self.name = name or evaluator.name
        self.reuse = reuse
        self.shadow = shadow
        self.shadow_share = shadow_share
        if budget is not None and cost is None:
            # cost= alone is allowed: a backfill's budget (install --budget-tokens) claims it.
            raise ValueError("budget= needs cost=: the budget claims each evaluation's "
                             "worst-case cost in tokens (an int, or a function of the input)")
        if budget is not None and not isinstance(budget, Budget):
            raise ValueError(f"budget= takes a Budget, got {budget!r}")
        if budget is not None and budget.money is not None and not model:
            raise ValueError(f"budget {budget.name!r} counts money: give model= (the model "
                             "the evaluator calls, priced by STREAMS_LLM_PRICES)")
        if budget is not None and budget.tokens is not None and isinstance(cost, int):
            budget.claim(cost, "")  # a fixed cost over the whole budget is refused now
        self.budget = budget
        self.cost = cost
        self.model = model
        self.price: ModelPrice | None = None  # a money budget's, bound by `priced`
        self._judging = KeyedLocks()  # verdict keys being looked up, judged and recorded

    def priced(self, prices: Mapping[str, ModelPrice]) -> None:
        """Bind the model's price from the worker's price table (a money budget's claims
        need it); ValidationFailed naming STREAMS_LLM_PRICES when the model has none."""
        if self.model is None or self.model not in prices:
            known = ", ".join(sorted(prices)) or "none"
            raise ValidationFailed(
                f"action {self.name!r}: model {self.model!r} has no price in "
                f"STREAMS_LLM_PRICES (priced: {known}); add it, e.g. "
                f'{{"{self.model}": {{"prompt": 0.15, "completion": 0.6}}}}')
        self.price = prices[self.model]
        if isinstance(self.cost, int) and self.budget is not None:
            self.budget.claim(self.cost, "", price=self.price, model=self.model)

    async def __call__(self, reaction: Reaction) -> Mapping[str, Any]:
        """Evaluate (or reuse the recorded verdict on the same input), give the verdict as
        feedback, and return the run's output."""
        judged = await self.input(reaction)
        target = await self.target(reaction)
        key = verdict_key(self.evaluator, judged)
        # Two runs of this process on the same input (one answer judged by two rules at
        # once, say) take turns from the look-up to the record: the second reuses the
        # first's verdict instead of calling the model too.
        async with self._judging.hold(key) if self.reuse else contextlib.nullcontext():
            checked = await _reusable(reaction, key, self.evaluator) if self.reuse else None
            reused = checked is not None
            claim: dict[str, Any] | None = None
            budget = self._budget_of(reaction) if checked is None else None
            if budget is not None:
                claim = self._claim_of(judged, reaction, budget)
                if not await _claim(reaction, budget, claim):
                    # Held back: no call. The run succeeds, judging nothing (over_budget).
                    return {"over_budget": budget.name, **_claimed(claim),
                            "evaluator": self.evaluator.name,
                            "version": self.evaluator.version, "verdict_key": key}
            if checked is None:
                try:
                    verdict = await self.evaluator.evaluate(judged)
                except HandOff:
                    return {"handed_off": self.name}
                checked = check_verdict(verdict, self.evaluator.verdict_type)
                if self.reuse:  # recorded before it is given: a retry after this reuses it
                    await _record(reaction, key, checked)
        recorded = await reaction.workspace.as_actor(checked.actor).give_feedback(
            checked.value, on=target)
        output = {**checked.as_output(), "feedback_id": recorded.id,
                  "feedback_seq": str(recorded.seq), "verdict_key": key, "reused": reused}
        if claim is not None:
            output.update(_claimed(claim))
            # A claim that was not a worst case: the budget's guarantee does not hold for
            # this call. Counted where the report and the logs see it.
            output.update(_overrun(claim, checked, self.price))
        if self.shadow is not None and _in_share(key, self.shadow_share):
            output["shadow"] = await self._shadow(self.shadow, judged, target, reaction)
        return output

    def promoted(self) -> EvaluatorAction[In]:
        """This action with its shadow version as the evaluator and no shadow: the same
        input, target, reuse, budget, cost and model. ValueError without a shadow."""
        if self.shadow is None:
            raise ValueError(f"action {self.name!r} has no shadow version to promote")
        promoted = EvaluatorAction(
            self.shadow, input=self.input, target=self.target,
            name=promoted_name(self.name, self.shadow.version), reuse=self.reuse,
            budget=None, cost=None, model=self.model)
        # Bound as they are (the constructor would claim a fixed cost over again).
        promoted.budget, promoted.cost, promoted.price = self.budget, self.cost, self.price
        return promoted

    def _budget_of(self, reaction: Reaction) -> Budget | None:
        """The budget this run's evaluations claim from: the reaction's (a backfill run's),
        else the action's own. ValidationFailed when the reaction has one and the action
        declares no cost to claim."""
        if reaction.budget is None:
            return self.budget
        if self.cost is None:
            raise ValidationFailed(
                f"action {self.name!r} has no cost= and rule {reaction.run.rule!r} was "
                f"backfilled with a budget ({reaction.budget.name!r}): give the action "
                "EvaluatorAction(cost=...) (one evaluation's worst case in tokens), or "
                "backfill without --budget-tokens")
        return reaction.budget

    def _claim_of(self, judged: In, reaction: Reaction, budget: Budget) -> dict[str, Any]:
        """The claim data of one evaluation of `judged` on `budget` (ValidationFailed as
        Budget.claim)."""
        cost = self.cost
        tokens = cost(judged) if callable(cost) else int(cost or 0)
        return budget.claim(tokens, reaction.run.run_id, price=self.price, model=self.model)

    async def _shadow(self, shadow: Evaluator[In, Any], judged: In, target: Target,
                      reaction: Reaction) -> dict[str, Any]:
        """The shadow version's verdict on `judged`, recorded apart (never given as
        feedback); what the run's output says of it."""
        key = verdict_key(shadow, judged)
        here = {"kind": target.kind, "id": target.id}
        record = await recorded_verdict(reaction.workspace, key)
        checked = None if record is None else _verdict_of(record, shadow.verdict_type)
        if record is not None and checked is not None:
            if record.get("target") != here:
                # Judged first on another target (another run on the same input): the
                # verdict is this target's too. Recorded on it, as a current version's
                # reused verdict is given again, so the measures count it here; by an id
                # of the key and the target, looked up first, so a retry, refire or
                # backfill records it once. No call.
                on_id = verdict_event_id(reaction.workspace.workspace, key,
                                         on=f"{target.kind}:{target.id}")
                if await _event_of(reaction.workspace, on_id) is None:
                    await _record(reaction, key, checked, shadow=True, target=here,
                                  reused=True, event_id=on_id)
            return {**checked.as_output(), "verdict_key": key, "reused": True}
        named = {"evaluator": shadow.name, "version": shadow.version}
        # The shadow's calls are spent from the same budget (at the action's cost).
        budget = self._budget_of(reaction)
        if budget is not None:
            try:
                claim = self._claim_of(judged, reaction, budget)
                if not await _claim(reaction, budget, claim):
                    return {**named, "over_budget": budget.name, **_claimed(claim)}
            except Exception as exc:  # a shadow never fails a run
                return {**named, "failed": f"{type(exc).__name__}: {exc}"}
        try:
            checked = check_verdict(await shadow.evaluate(judged), shadow.verdict_type)
        except HandOff as exc:
            return {**named, "handed_off": str(exc)}
        except Exception as exc:  # the current verdict is given: a shadow never fails a run
            return {**named, "failed": f"{type(exc).__name__}: {exc}"}
        await _record(reaction, key, checked,
                      shadow=True, target={"kind": target.kind, "id": target.id})
        return {**checked.as_output(), "verdict_key": key, "reused": False}


def promoted_name(action: str, version: str) -> str:
    """The registry name of an evaluator action promoted to its shadow's `version`:
    `<action>@<version>`."""
    return f"{action}@{version}"


def with_promotions(actions: Mapping[str, Any]) -> dict[str, Any]:
    """The action registry with, for each EvaluatorAction that has a shadow version, its
    promoted form under `promoted_name` (unless the registry names that already): what
    `streams rules promote` points an installed rule at, so a rule switches to the new
    version as data, and back, while every worker keeps its code."""
    out = dict(actions)
    for name, action in actions.items():
        if isinstance(action, EvaluatorAction) and action.shadow is not None:
            out.setdefault(promoted_name(name, action.shadow.version), action.promoted())
    return out


async def _reusable(reaction: Reaction, key: str,
                    evaluator: Evaluator[Any, Any]) -> Verdict[Feedback] | None:
    """The verdict recorded under `key` in the reaction's workspace, when there is one that
    still validates as the evaluator's verdict type."""
    record = await recorded_verdict(reaction.workspace, key)
    return None if record is None else _verdict_of(record, evaluator.verdict_type)


async def _event_of(workspace: ActingWorkspace, event_id: str) -> Envelope | None:
    """The newest event of that id in `workspace`, or None: through the handle's index
    (`event`), else by reading the log. An index too far behind to catch up (a backlog)
    answers None: the caller judges or records again, under the same id, which readers
    keyed by id see once."""
    own = getattr(workspace, "event", None)
    if own is None:
        same = [e for e in await workspace.read() if e.event_id == event_id]
        return same[-1] if same else None
    try:
        found: Envelope | None = await own(event_id)
    except IndexBehind:
        return None
    return found


async def _record(reaction: Reaction, key: str, checked: Verdict[Feedback], *,
                  event_id: str | None = None, **extra: object) -> None:
    """Record a verdict under `key`, in the run's chain, by the id derived from the key
    unless `event_id` says another (`extra`: a shadow's flag and target)."""
    workspace = reaction.workspace
    await workspace.append(
        AppEvent(name=VERDICT_RECORD, data={"key": key, **checked.as_output(), **extra}),
        correlation_id=reaction.started.correlation_id, causation_id=reaction.started.event_id,
        event_id=event_id or verdict_event_id(workspace.workspace, key))


async def _claim(reaction: Reaction, budget: Budget, data: dict[str, Any]) -> bool:
    """Claim `data` (Budget.claim's) of `budget` for the reaction's run and wait for the
    decider's answer (the workspace handle's `decide`): whether the call may be made."""
    decide = getattr(reaction.workspace, "decide", None)
    if decide is None:
        raise ValidationFailed(f"budget {budget.name!r}: this workspace cannot have claims "
                               "decided (budgets need the workers' rule decider; an "
                               "in-memory replay has none)")
    granted: bool = await decide(budget.rule, AppEvent(name=BUDGET_CLAIM, data=data),
                                 correlation_id=reaction.started.correlation_id,
                                 causation_id=reaction.started.event_id)
    return granted


def _claimed(claim: Mapping[str, Any]) -> dict[str, Any]:
    """What a run's output says of its claim: the tokens, and a money claim's micros."""
    out = {"claimed_tokens": claim["tokens"]}
    if "micros" in claim:
        out["claimed_micros"] = claim["micros"]
    return out


def _overrun(claim: Mapping[str, Any], verdict: Verdict[Feedback],
             price: ModelPrice | None) -> dict[str, int]:
    """How far the verdict's reported usage passed its claim (`budget_overrun_tokens`, and
    for a money claim `budget_overrun_micros`); nothing without usage figures."""
    used = _tokens_used(verdict)
    if used is None:
        return {}
    prompt, completion = used
    out: dict[str, int] = {}
    if prompt + completion > claim["tokens"]:
        out["budget_overrun_tokens"] = prompt + completion - claim["tokens"]
    if "micros" in claim and price is not None:
        spent = micros_of(prompt, price.prompt) + micros_of(completion, price.completion)
        if spent > claim["micros"]:
            out["budget_overrun_micros"] = spent - claim["micros"]
    return out


def _tokens_used(verdict: Verdict[Feedback]) -> tuple[int, int] | None:
    """The (prompt, completion) tokens a verdict's trace reports, or None without them."""
    trace = verdict.trace or {}
    try:
        prompt, completion = trace.get("prompt_tokens"), trace.get("completion_tokens")
        if prompt is None and completion is None:
            return None
        return int(prompt or 0), int(completion or 0)
    except (TypeError, ValueError):
        return None


def _in_share(key: str, share: float) -> bool:
    """Whether the input of a verdict key falls in the first `share` of [0, 1) (by its
    digest: the same inputs, the same answer everywhere)."""
    return share >= 1.0 or int(key.rsplit(":", 1)[1][:16], 16) / 2**64 < share

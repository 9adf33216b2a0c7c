"""Least privilege in the core: who may append what, and the in-memory workspace enforcing it
(the same check the broker-backed handle makes, tests/runtime/test_workspace_capabilities.py).
"""

import pytest

from streams.core.actors import AgentActor, EvaluatorActor, SystemActor, UserActor
from streams.core.capabilities import (
    EVERYTHING,
    FEEDBACK_ONLY,
    Capability,
    Grants,
    builtin_grants,
    needed_to_append,
)
from streams.core.errors import Forbidden
from streams.core.events import AppEvent, Change, ProposalMade, ProposalResolved, RuleInstalled
from streams.core.proposals import EVALUATOR
from streams.core.replay import MemoryLog, MemoryWorkspace

ADA = UserActor(id="ada")


def _proposal() -> ProposalMade:
    return ProposalMade(proposal_id="p1", artifact_id="a1", kind="note",
                        change=Change(set={"text": "x"}))


def test_feedback_needs_give_feedback_and_everything_else_append() -> None:
    assert needed_to_append("feedback_given") is Capability.GIVE_FEEDBACK
    for other in ("proposal_made", "proposal_resolved", "rule_installed", "run_started",
                  "ops:error_spike"):
        assert needed_to_append(other) is Capability.APPEND


def test_actors_not_named_may_do_everything() -> None:
    grants = builtin_grants()
    for actor in (ADA, SystemActor(), AgentActor(id="rule:x"), EvaluatorActor(name="judge")):
        assert grants.of(actor) == EVERYTHING
        grants.check_append(actor, "proposal_made")


def test_the_proposal_outcome_evaluator_may_only_give_feedback_and_read() -> None:
    grants = builtin_grants()
    assert grants.of(EVALUATOR) == FEEDBACK_ONLY
    grants.check_append(EVALUATOR, "feedback_given")
    grants.check(EVALUATOR, Capability.READ, doing="reading")
    # Another version of the same evaluator is another participant: not restricted by this.
    assert grants.of(EvaluatorActor(name=EVALUATOR.name, version="2")) == EVERYTHING
    for event_type in ("proposal_made", "proposal_resolved", "rule_installed",
                       "rule_archived", "artifact_created", "run_started", "ops:anything"):
        with pytest.raises(Forbidden) as refused:
            grants.check_append(EVALUATOR, event_type)
        message = str(refused.value)
        assert EVALUATOR.participant in message
        assert f"appending {event_type}" in message
        assert "'append'" in message
        assert "give_feedback, read" in message


def test_a_handle_can_narrow_but_never_widen_a_grant() -> None:
    grants = Grants().with_grant(ADA, {Capability.READ})
    with pytest.raises(Forbidden):
        grants.check_append(ADA, "feedback_given", narrowed=EVERYTHING)
    bob = UserActor(id="bob")
    grants.check_append(bob, "feedback_given", narrowed=FEEDBACK_ONLY)
    with pytest.raises(Forbidden, match="user:bob may only give_feedback, read"):
        grants.check_append(bob, "proposal_made", narrowed=FEEDBACK_ONLY)
    with pytest.raises(Forbidden, match="may only nothing"):
        grants.check(bob, Capability.READ, doing="reading", narrowed=frozenset())


async def test_the_in_memory_workspace_refuses_the_evaluators_other_appends() -> None:
    log = MemoryLog("acme", {})
    evaluator = MemoryWorkspace(log, "support").as_actor(EVALUATOR)
    for event in (_proposal(), ProposalResolved(proposal_id="p1", resolution="rejected"),
                  RuleInstalled(rule="r"), AppEvent(name="ops:error_spike")):
        with pytest.raises(Forbidden):
            await evaluator.append(event)
    assert log.envelopes == []
    assert await evaluator.read() == []          # reading is allowed
    # The application, as itself, may append the same event.
    recorded = await evaluator.as_actor(ADA).append(_proposal())
    assert [e.event_id for e in log.envelopes] == [recorded.id]


async def test_an_in_memory_handle_narrowed_to_feedback_cannot_append_or_read_past_it() -> None:
    log = MemoryLog("acme", {})
    narrowed = MemoryWorkspace(log, "support").as_actor(
        ADA, capabilities=frozenset({Capability.GIVE_FEEDBACK}))
    with pytest.raises(Forbidden, match="appending proposal_made"):
        await narrowed.append(_proposal())
    with pytest.raises(Forbidden, match="reading the log"):
        await narrowed.read()
    assert log.envelopes == []

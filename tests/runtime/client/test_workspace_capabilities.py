"""The broker-backed workspace handle enforces the same least privilege, before any I/O: the
client points at a port nobody listens on, so anything but Forbidden would be a connection
error or a timeout."""

import pytest

from streams.core.actors import UserActor
from streams.core.capabilities import Capability
from streams.core.errors import Forbidden
from streams.core.events import Change, Envelope, ProposalMade
from streams.core.proposals import EVALUATOR, ProposalOutcome
from streams.core.targets import RunTarget
from tests.runtime.client.factories import offline_client


async def test_the_evaluator_cannot_append_anything_but_feedback() -> None:
    client = offline_client()
    evaluator = client.workspace("acme", "support").as_actor(EVALUATOR)
    proposal = ProposalMade(proposal_id="p1", artifact_id="a1", kind="note",
                            change=Change(set={"text": "x"}))
    with pytest.raises(Forbidden, match=r"evaluator:proposal-outcome@0 may only give_feedback"):
        await evaluator.append(proposal)
    # An envelope built elsewhere, written as the evaluator through another actor's handle,
    # is refused the same way: the check is on the envelope's actor.
    ada = client.workspace("acme", "support").as_actor(UserActor(id="ada"))
    forged = Envelope.new(proposal, tenant="acme", workspace="support", actor=EVALUATOR)
    with pytest.raises(Forbidden, match="appending proposal_made"):
        await ada.append_envelope(forged)


async def test_a_narrowed_handle_refuses_before_any_io() -> None:
    client = offline_client()
    reader = client.workspace("acme", "support").as_actor(
        UserActor(id="ada"), capabilities=frozenset({Capability.READ}))
    with pytest.raises(Forbidden, match="appending feedback_given needs 'give_feedback'"):
        await reader.give_feedback(ProposalOutcome(proposal_id="p", outcome="accepted"),
                                   on=RunTarget(run_id="r"))
    writer = client.workspace("acme", "support").as_actor(
        UserActor(id="ada"), capabilities=frozenset({Capability.GIVE_FEEDBACK}))
    for call in (writer.read(), writer.runs(), writer.run_record("r")):
        with pytest.raises(Forbidden, match="needs 'read'"):
            await call


async def test_proposal_methods_check_capabilities_before_any_io() -> None:
    client = offline_client()
    evaluator = client.workspace("acme", "support").as_actor(EVALUATOR)
    with pytest.raises(Forbidden, match="appending artifact_created"):
        await evaluator.create_artifact("a1", {"text": "x"})
    with pytest.raises(Forbidden, match="appending proposal_made"):
        await evaluator.propose("a1", {"set": {"text": "y"}})
    with pytest.raises(Forbidden, match="appending proposal_resolved"):
        await evaluator.resolve("p1")
    writer = client.workspace("acme", "support").as_actor(
        UserActor(id="ada"), capabilities=frozenset({Capability.APPEND}))
    with pytest.raises(Forbidden, match="reading proposals needs 'read'"):
        await writer.proposal_fold()

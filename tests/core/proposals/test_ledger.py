"""The artifact ledger: versions and their authors, proposal states, what a proposal alone
would make, repeats, and how (and only how) a proposal is linked to a run."""

from datetime import timedelta

from streams.core.actors import AgentActor
from streams.core.events import Change, Envelope, ProposalMade, RunStarted
from streams.core.ids import firing_id, run_id_of, started_event_id
from streams.core.proposals import apply_change, fold_ledger
from tests.core.proposals.log import ADA, BOB, Log, agent

RULE = "chat:draft-rule"


def test_versions_are_credited_to_their_authors() -> None:
    log = Log()
    log.create("a1", {"when": "x", "then": "y"}, actor=ADA)
    log.revise("a1", Change(set={"then": "z"}), actor=BOB)
    run = log.run(RULE)
    proposal = log.propose("p1", "a1", Change(set={"when": "w"}, unset=["then"]), by=run)
    log.resolve(proposal, actor=ADA)
    artifact = fold_ledger(log.envelopes).artifact("a1")
    assert artifact is not None
    assert [dict(v.content) for v in artifact.versions] == [
        {"when": "x", "then": "y"}, {"when": "x", "then": "z"}, {"when": "w"}]
    assert [v.author for v in artifact.versions] == [ADA, BOB, agent(RULE)]
    assert [v.recorded_by for v in artifact.versions] == [ADA, BOB, ADA]
    assert artifact.versions[-1].proposal_id == "p1"
    assert [v.number for v in artifact.versions] == [1, 2, 3]


def test_what_a_proposal_alone_would_make_and_its_states() -> None:
    log = Log()
    log.create("a1", {"when": "x"})
    run = log.run(RULE)
    proposal = log.propose("p1", "a1", Change(set={"then": "page"}), by=run)
    open_ledger = fold_ledger(log.envelopes)
    state = open_ledger.proposal("p1")
    assert state is not None and state.state == "open" and state.proposer == agent(RULE)
    assert open_ledger.alone("p1") == {"when": "x", "then": "page"}
    assert open_ledger.outcome("p1") is None
    log.resolve(proposal, changes=Change(set={"then": "email"}))
    ledger = fold_ledger(log.envelopes)
    state = ledger.proposal("p1")
    assert state is not None and state.state == "accepted" and state.resolution is not None
    assert dict(state.resolution.alone or {}) == {"when": "x", "then": "page"}
    assert dict(state.resolution.made or {}) == {"when": "x", "then": "email"}
    assert ledger.outcome("p1") == "edited"
    assert ledger.proposal("nope") is None and ledger.alone("nope") is None


def test_a_proposal_for_a_new_artifact_creates_it_when_accepted_and_not_when_rejected() -> None:
    log = Log()
    run = log.run(RULE)
    log.resolve(log.propose("p1", "new", Change(set={"when": "x"}), by=run, kind="rule"))
    log.resolve(log.propose("p2", "other", Change(set={"when": "y"}), by=run), "rejected")
    ledger = fold_ledger(log.envelopes)
    created = ledger.artifact("new")
    assert created is not None and created.kind == "rule"
    assert [dict(v.content) for v in created.versions] == [{"when": "x"}]
    assert ledger.artifact("other") is None
    assert ledger.outcome("p2") == "rejected"


def test_an_accepted_archive_proposal_archives_without_changing_text() -> None:
    log = Log()
    log.create("a1", {"when": "x"})
    run = log.run(RULE)
    log.resolve(log.propose("p1", "a1", by=run, action="archive"))
    ledger = fold_ledger(log.envelopes)
    artifact = ledger.artifact("a1")
    assert artifact is not None
    last = artifact.versions[-1]
    assert last.archive and dict(last.content) == {"when": "x"} and last.author == agent(RULE)
    assert artifact.archived_at == last.time
    assert ledger.outcome("p1") == "accepted" and ledger.alone("p1") is None


def test_an_archive_resolved_with_changes_is_not_a_resolution() -> None:
    log = Log()
    log.create("a1", {"when": "x"})
    run = log.run(RULE)
    proposal = log.propose("p1", "a1", by=run, action="archive")
    bad = log.resolve(proposal, changes=Change(set={"when": "y"}))
    ledger = fold_ledger(log.envelopes)
    state = ledger.proposal("p1")
    assert state is not None and state.state == "open"
    assert any(bad.event_id in p and "takes no changes" in p for p in ledger.problems)


def test_the_first_resolution_is_the_resolution() -> None:
    log = Log()
    log.create("a1", {"when": "x"})
    run = log.run(RULE)
    proposal = log.propose("p1", "a1", Change(set={"when": "y"}), by=run)
    log.resolve(proposal, "rejected")
    second = log.resolve(proposal, "accepted")
    ledger = fold_ledger(log.envelopes)
    state = ledger.proposal("p1")
    assert state is not None and state.state == "rejected"
    assert state.later_resolutions == [second]
    artifact = ledger.artifact("a1")
    assert artifact is not None and len(artifact.versions) == 1


def test_a_repeated_envelope_is_one_event() -> None:
    log = Log()
    log.create("a1", {"when": "x"})
    log.revise("a1", Change(set={"when": "y"}))
    ledger = fold_ledger([*log.envelopes, *log.envelopes])
    artifact = ledger.artifact("a1")
    assert artifact is not None and len(artifact.versions) == 2
    assert ledger.problems == []


def test_a_proposal_id_belongs_to_its_first_proposal() -> None:
    log = Log()
    log.create("a1", {"when": "x"})
    run = log.run(RULE)
    first = log.propose("p1", "a1", Change(set={"when": "y"}), by=run)
    retried = log.propose("p1", "a1", Change(set={"when": "y"}), by=run)  # attempt 2
    clash = log.propose("p1", "a1", Change(set={"when": "evil"}), by=BOB)
    ledger = fold_ledger(log.envelopes)
    state = ledger.proposal("p1")
    assert state is not None and state.envelope == first
    assert not any(retried.event_id in p for p in ledger.problems)
    assert any(clash.event_id in p and "made already" in p for p in ledger.problems)


def test_a_resolution_read_before_its_proposal_waits_for_it() -> None:
    log = Log()
    log.create("a1", {"when": "x"})
    run = log.run(RULE)
    proposal = log.propose("p1", "a1", Change(set={"when": "y"}), by=run)
    resolved = log.resolve("p1")
    early = fold_ledger([e for e in log.envelopes if e is not proposal] + [resolved])
    assert early.unresolvable == {"p1": [resolved]}
    reordered = [e for e in log.envelopes if e is not proposal]
    reordered.append(proposal)
    ledger = fold_ledger(reordered)
    assert ledger.outcome("p1") == "accepted" and ledger.unresolvable == {}


def test_changes_apply_set_then_unset() -> None:
    assert apply_change({"a": "1", "b": "2"}, Change(set={"a": "3", "c": "4"}, unset=["b", "c",
                                                                                     "zz"])) \
        == {"a": "3"}
    assert apply_change({"a": "1"}, None) == {"a": "1"}


# -- linking a proposal to a run --------------------------------------------------------------


def test_a_runs_own_proposal_is_traced_to_it() -> None:
    log = Log()
    run = log.run(RULE)
    log.propose("p1", "a1", Change(set={"x": "1"}), by=run)
    # through another event of the run's chain, too
    step = log.append(ProposalMade(proposal_id="tmp", artifact_id="z", kind="note",
                                   change=Change()), agent(RULE), after=run)
    log.append(ProposalMade(proposal_id="p2", artifact_id="a2", kind="rule",
                            change=Change(), run_id=None), agent(RULE), after=step)
    ledger = fold_ledger(log.envelopes)
    assert isinstance(run.event, RunStarted)
    for pid in ("p1", "p2"):
        traced = ledger.run_of(pid)
        assert traced is not None and traced.run_id == run.event.run_id and traced.rule == RULE


def test_a_client_claiming_a_run_is_not_traced_to_it() -> None:
    log = Log()
    run = log.run(RULE)
    assert isinstance(run.event, RunStarted)
    run_id = run.event.run_id
    log.propose("by-user", "a1", Change(), by=ADA, run_id=run_id)
    log.propose("by-agent", "a1", Change(), by=agent(RULE), run_id=run_id)  # not in its chain
    log.propose(run_id, "a1", Change(), by=ADA, run_id=run_id)             # the run's id
    log.propose(started_event_id(run_id), "a1", Change(), by=agent(RULE))
    # in the run's chain, caused by it, but by a person
    log.append(ProposalMade(proposal_id="in-chain", artifact_id="a1", kind="rule",
                            change=Change(), run_id=run_id), ADA, after=run)
    # in the run's chain, by another rule's agent
    log.append(ProposalMade(proposal_id="other-rule", artifact_id="a1", kind="rule",
                            change=Change(), run_id=run_id), agent("chat:other"), after=run)
    # caused by the run_started, by the rule's agent, but in another chain
    log.envelopes.append(Envelope.new(
        ProposalMade(proposal_id="other-chain", artifact_id="a1", kind="rule", change=Change(),
                     run_id=run_id), tenant="acme", workspace="prod", actor=agent(RULE),
        correlation_id="evt_elsewhere", causation_id=run.event_id))
    ledger = fold_ledger(log.envelopes)
    for pid in ("by-user", "by-agent", run_id, started_event_id(run_id), "in-chain",
                "other-rule", "other-chain"):
        assert ledger.proposal(pid) is not None
        assert ledger.run_of(pid) is None, pid


def test_a_claim_that_disagrees_with_the_chain_is_not_traced() -> None:
    log = Log()
    run = log.run(RULE)
    other = log.run(RULE)
    assert isinstance(other.event, RunStarted)
    log.propose("p1", "a1", Change(), by=run, run_id=other.event.run_id)
    assert fold_ledger(log.envelopes).run_of("p1") is None


def test_a_forged_run_started_traces_nothing() -> None:
    log = Log()
    cause = log.append(ProposalMade(proposal_id="seed", artifact_id="s", kind="note",
                                    change=Change()), ADA)
    fid = firing_id(RULE, cause.event_id)
    rid = run_id_of(fid)
    by_person = log.append(RunStarted(run_id=rid, rule=RULE, action="draft", firing_id=fid),
                           ADA, after=cause, event_id=started_event_id(rid))
    log.append(ProposalMade(proposal_id="p1", artifact_id="a1", kind="rule", change=Change(),
                            run_id=rid), agent(RULE), after=by_person)
    made_up = log.append(RunStarted(run_id="run_chosen", rule=RULE, action="draft",
                                    firing_id=fid), agent(RULE), after=cause,
                         event_id=started_event_id("run_chosen"))
    log.append(ProposalMade(proposal_id="p2", artifact_id="a1", kind="rule", change=Change(),
                            run_id="run_chosen"), agent(RULE), after=made_up)
    ledger = fold_ledger(log.envelopes)
    assert ledger.run_of("p1") is None and ledger.run_of("p2") is None


def test_time_moves_forward_in_the_builder() -> None:
    log = Log()
    first = log.create("a1", {})
    second = log.revise("a1", Change())
    assert second.time - first.time == timedelta(milliseconds=1)
    assert isinstance(agent(RULE), AgentActor)

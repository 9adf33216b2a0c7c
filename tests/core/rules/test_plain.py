"""Rules on decoded plain records (streams.core.plain): the layout the adapter builds, exact
answers and "cannot tell", the matcher's index, and stateless firings made without the
engine that are the engine's own."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from streams.adapters.avro.codec import envelope_from_record, envelope_to_record, plain_from_record
from streams.core.actors import EvaluatorActor, UserActor
from streams.core.events import (
    AppEvent,
    Envelope,
    Event,
    FeedbackGiven,
    ProposalMade,
    RunSucceeded,
    Seq,
)
from streams.core.matching import Hit, Matcher
from streams.core.plain import PlainEvent
from streams.core.rules import F, Rule, RuleSet, RuleState, all_of, any_of, evaluate, not_, on, run
from streams.core.runs import fire_envelopes
from streams.core.targets import RunTarget


def envelope(event: Event, **kw: object) -> Envelope:
    return Envelope.new(event, tenant="acme", workspace="prod",  # type: ignore[arg-type]
                        actor=kw.pop("actor", UserActor(id="ada")), **kw)


def plain_of(env: Envelope, *, millis: bool = True) -> tuple[PlainEvent, Envelope]:
    record = envelope_to_record(env)
    if millis:  # as the mirror's codec mode gives it
        record["envelope"]["time"] = int(env.time.timestamp() * 1000)
    plain = plain_from_record(record, 0, 5)
    assert plain is not None
    return plain, envelope_from_record(record, Seq(partition=0, offset=5))


def test_the_plain_form_lays_the_payload_out_as_the_model() -> None:
    app, _ = plain_of(envelope(AppEvent(name="t:a", data={"n": 2, "s": {"x": [1]}})))
    assert app.payload == {"name": "t:a", "data": {"n": 2, "s": {"x": [1]}}} and app.app
    fb, _ = plain_of(envelope(FeedbackGiven(feedback_type="q", target=RunTarget(run_id="r1"),
                                            value={"correct": False})))
    assert fb.payload["target"] == {"kind": "run", "id": "r1"} and not fb.app
    ok, _ = plain_of(envelope(RunSucceeded(run_id="r", rule="x", action="a",
                                           output={"ok": True})))
    assert ok.payload == {"run_id": "r", "rule": "x", "action": "a", "attempt": 1,
                          "output": {"ok": True}}
    when = datetime(2026, 1, 2, 3, 4, 5, 6000, tzinfo=UTC)
    ev, full = plain_of(envelope(AppEvent(name="t:a"), actor=EvaluatorActor(name="j"),
                                 time=when))
    assert ev.time() == full.time == when and ev.participant() == "evaluator:j@0"


def test_a_record_the_plain_form_cannot_hold_exactly_has_none() -> None:
    record = envelope_to_record(envelope(AppEvent(name="t:a")))
    assert plain_from_record({**record, "data_json": "[1, 2]"}) is None
    assert plain_from_record({**record, "data_json": "not json"}) is None
    typed = envelope_to_record(envelope(RunSucceeded(run_id="r", rule="x", action="a")))
    assert plain_from_record({**typed, "surprise": 1}) is None
    assert plain_from_record({"envelope": {"event_type": "t:a"}}) is None


def test_predicates_answer_exactly_or_cannot_tell() -> None:
    fb, full = plain_of(envelope(FeedbackGiven(
        feedback_type="q", target=RunTarget(run_id="r1"), value={"correct": False})))
    assert F.value.correct.eq(False).plain(fb) is True
    assert F.value.correct.eq(0).plain(fb) is False  # False is not 0, as on the envelope
    assert F.target.kind.eq("run").plain(fb) is True
    assert F.target.run_id.eq("r1").plain(fb) is True
    assert F.target.id.exists().plain(fb) is False  # not a field of RunTarget
    assert F.target.exists().plain(fb) is None  # the model itself: only the envelope can say
    assert F.nothing.exists().plain(fb) is False
    assert F.envelope.seq.offset.eq(5).plain(fb) is None
    assert F.envelope.trace.exists().plain(fb) is True  # present, and None
    for pred in (F.target.id.exists(), F.target.run_id.eq("r1"), F.target.kind.eq("run")):
        assert pred.plain(fb) is pred.test(full)
    def check(e: Envelope) -> bool:
        return True

    rule = Rule(name="t:check", when=on(FeedbackGiven).where(check), then=run("a"))
    assert rule.matches_plain(fb) is None and rule.matches(full)
    proposal, _ = plain_of(envelope(ProposalMade(proposal_id="p", artifact_id="a", kind="k",
                                                 action="archive")))
    assert F.change.exists().plain(proposal) is None  # a model field


def test_a_maybe_before_a_sure_true_in_any_of_is_a_maybe() -> None:
    app, _ = plain_of(envelope(AppEvent(name="t:a", data={"n": 2})))
    def broken(e: Envelope) -> bool:
        raise ZeroDivisionError

    assert any_of(F.data.n.gt(1), broken).plain(app) is True  # the envelope's stops first
    assert any_of(broken, F.data.n.gt(1)).plain(app) is None  # the envelope's raises first
    # Raises or fails: not a sure False, since a Not above would make it a sure True.
    assert all_of(broken, F.data.n.gt(5)).plain(app) is None
    assert not_(all_of(broken, F.data.n.gt(5))).plain(app) is None
    assert all_of(F.data.n.gt(5), broken).plain(app) is False
    # The same through the matcher's compiled triggers; a trigger's own conjunction rejects
    # on a sure False wherever it is (raising is no match either).
    rules = [Rule(name=f"t:r{i}", when=on("t:a").where(pred), then=run("a")) for i, pred in
             enumerate([any_of(F.data.n.gt(1), broken), any_of(broken, F.data.n.gt(1)),
                        all_of(broken, F.data.n.gt(5)), not_(any_of(broken, F.data.n.gt(1))),
                        not_(all_of(broken, F.data.n.gt(5)))])]
    hits = Matcher(RuleSet(rules)).match_plain(app)
    assert [(h.rule.name, h.sure) for h in hits] == [("t:r0", True), ("t:r1", False),
                                                     ("t:r3", False), ("t:r4", False)]


RULES = [
    *(Rule(name=f"t:fb-{i}", when=on(FeedbackGiven).where(
        F.value.correct.eq(False), feedback_type=f"type_{i}"), then=run("a"))
      for i in range(5)),
    *(Rule(name=f"t:svc-{i}", when=on("t:a").where(F.data.service.isin([f"s{i}", f"q{i}"])),
           then=run("a")) for i in range(5)),
    Rule(name="t:any", when=on(AppEvent).where(F.data.flag.eq(True)), then=run("a")),
    Rule(name="t:counted", when=on("t:a").where(F.data.service.eq("s1"))
         .count(2, within=timedelta(minutes=1)), then=run("a")),
]


def test_the_index_gives_only_the_rules_the_fields_can_match() -> None:
    matcher = Matcher(RuleSet(RULES))
    fb, _ = plain_of(envelope(FeedbackGiven(feedback_type="type_3",
                                            target=RunTarget(run_id="r"),
                                            value={"correct": False})))
    assert [h.rule.name for h in matcher.match_plain(fb)] == ["t:fb-3"]
    other, _ = plain_of(envelope(FeedbackGiven(feedback_type="nobody",
                                               target=RunTarget(run_id="r"),
                                               value={"correct": False})))
    assert matcher.match_plain(other) == []
    app, full = plain_of(envelope(AppEvent(name="t:a", data={"service": "s1", "flag": True})))
    hits = matcher.match_plain(app)
    assert [(h.rule.name, h.sure) for h in hits] == \
        [("t:svc-1", True), ("t:counted", True), ("t:any", True)]
    assert matcher.match(full, hits) == Matcher(RuleSet(RULES)).match(full)
    unwatched, _ = plain_of(envelope(RunSucceeded(run_id="r", rule="x", action="a")))
    assert matcher.match_plain(unwatched) == []


def test_a_stateless_firing_is_the_engines_own() -> None:
    matcher = Matcher(RuleSet(RULES))
    app, full = plain_of(envelope(AppEvent(name="t:a", data={"service": "q2"})))
    [hit] = matcher.match_plain(app)
    assert hit == Hit(RULES[7], False, True)
    [fire] = matcher.match(full, [hit])
    [engine] = evaluate(RuleSet([RULES[7]]), full, RuleState())
    assert fire == engine and fire.firing_id == engine.firing_id
    ours, theirs = fire_envelopes(fire, full), fire_envelopes(engine, full)  # type: ignore[arg-type]
    assert [e.event_id for e in ours] == [e.event_id for e in theirs]
    assert [e.event for e in ours] == [e.event for e in theirs]

import pytest

from streams.core.errors import ValidationFailed
from streams.core.events import AppEvent, Envelope, RuleFired, RunStarted, TraceContext
from streams.core.targets import ChainTarget, FiringTarget, RunTarget
from streams.core.view import LogIndex

TRACE = TraceContext(traceparent=f"00-{'c' * 32}-{'d' * 16}-01")


def _chain() -> tuple[LogIndex, Envelope, Envelope, Envelope]:
    start = Envelope.new(AppEvent(name="ops:error_spike"), tenant="acme", workspace="prod",
                         trace=TRACE)
    fired = start.follow(RuleFired(firing_id="fir_1", rule="r", matched=[start.event_id]))
    run = fired.follow(RunStarted(run_id="run_1", rule="r", action="a", firing_id="fir_1"))
    index = LogIndex()
    for envelope in (start, fired, run):
        index.apply(envelope)
    return index, start, fired, run


def test_locates_runs_firings_and_chains() -> None:
    index, start, fired, run = _chain()
    found = index.locate(RunTarget(run_id="run_1"), "prod")
    assert found is not None
    assert (found.correlation_id, found.event_id, found.trace_id) == (
        start.event_id, run.event_id, "c" * 32)
    firing = index.locate(FiringTarget(firing_id="fir_1"), "prod")
    assert firing is not None and firing.event_id == fired.event_id
    chain = index.locate(ChainTarget(correlation_id=start.event_id), "prod")
    assert chain is not None and chain.event_id == start.event_id


def test_other_workspace_does_not_see_it() -> None:
    index, *_ = _chain()
    assert index.locate(RunTarget(run_id="run_1"), "staging") is None


def test_unknown_is_none() -> None:
    index, *_ = _chain()
    assert index.locate(RunTarget(run_id="run_2"), "prod") is None


def test_chain_target_must_be_first_event() -> None:
    index, start, _fired, run = _chain()
    with pytest.raises(ValidationFailed, match=start.event_id):
        index.locate(ChainTarget(correlation_id=run.event_id), "prod")

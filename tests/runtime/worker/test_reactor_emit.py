"""The reactor's emit (a run's outcome events): each awaits its own delivery report, in
order; what fails that way goes, with everything after it, to the retrying delivery."""

from types import SimpleNamespace
from typing import Any

from streams.core.actors import UserActor
from streams.core.errors import KafkaUnavailable
from streams.core.events import AppEvent, Envelope
from streams.runtime.worker.reactor import Reactor


def _envelope(n: int) -> Envelope:
    return Envelope.new(AppEvent(name="t:e", data={"n": n}), tenant="acme", workspace="w",
                        actor=UserActor(id="ada"))


def _reactor(fail_at: int | None) -> tuple[Reactor, list[str], list[list[str]]]:
    appended: list[str] = []
    retried: list[list[str]] = []

    async def append(envelope: Envelope) -> None:
        if fail_at is not None and len(appended) == fail_at:
            appended.append(f"failed {envelope.event_id}")
            raise KafkaUnavailable("broker down")
        appended.append(envelope.event_id)

    async def deliver(records: list[Any]) -> None:
        retried.append(list(records))

    reactor = Reactor.__new__(Reactor)
    reactor.client = SimpleNamespace(log=SimpleNamespace(append=append))  # type: ignore[assignment]
    reactor.runtime = SimpleNamespace(delivery=SimpleNamespace(deliver=deliver))  # type: ignore[assignment]
    reactor.records = SimpleNamespace(envelope=lambda e: e.event_id)  # type: ignore[assignment]
    return reactor, appended, retried


async def test_each_outcome_is_appended_in_order() -> None:
    reactor, appended, retried = _reactor(None)
    envelopes = [_envelope(n) for n in range(3)]
    await reactor.emit(envelopes)
    assert appended == [e.event_id for e in envelopes] and retried == []


async def test_what_fails_goes_to_the_retrying_delivery_with_what_follows() -> None:
    reactor, appended, retried = _reactor(1)
    envelopes = [_envelope(n) for n in range(3)]
    await reactor.emit(envelopes)
    assert appended == [envelopes[0].event_id, f"failed {envelopes[1].event_id}"]
    assert retried == [[envelopes[1].event_id, envelopes[2].event_id]]


def test_a_batch_may_run_actions_only_when_it_holds_a_run_started() -> None:
    def message(event_type: bytes | None) -> Any:
        headers = [] if event_type is None else [("event_type", event_type)]
        return SimpleNamespace(headers=lambda: headers)

    assert Reactor.may_run_actions([message(b"app_event"), message(b"run_started")])
    assert not Reactor.may_run_actions([message(b"app_event"), message(b"feedback_given")])
    assert not Reactor.may_run_actions([message(None)])
    assert not Reactor.may_run_actions([])

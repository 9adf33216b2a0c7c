"""Time to resolution: from a chain's first event to the first event that resolves it.

A chain starts at the event that began it (the envelope whose event id is the chain's
correlation id; if the log lacks it, the chain's earliest event). For a rule that counts, the
firing joins the chain of the event that completed the count, so the time runs from that
event. Whether a chain achieved its goal is a judgement: give it as feedback on the chain.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import timedelta

from streams.core.errors import ValidationFailed
from streams.core.events import Envelope
from streams.core.measures.source import LogSource, envelopes_of

__all__ = ["MeasureError", "fold_time_to_resolution", "time_to_resolution"]


class MeasureError(ValidationFailed):
    """A measure could not be computed from its input: the message names what and where."""


def fold_time_to_resolution(
    envelopes: Iterable[Envelope], resolves: Callable[[Envelope], bool],
) -> dict[str, timedelta]:
    """{correlation_id: time from the chain's start to its first resolving event}."""
    started: dict[str, Envelope] = {}
    earliest: dict[str, Envelope] = {}
    resolved: dict[str, Envelope] = {}
    for envelope in envelopes:
        chain = envelope.correlation_id
        if envelope.event_id == chain:
            started[chain] = envelope
        first = earliest.get(chain)
        if first is None or envelope.time < first.time:
            earliest[chain] = envelope
        try:
            hit = resolves(envelope)
        except Exception as exc:
            raise MeasureError(
                f"the resolves predicate raised {type(exc).__name__}: {exc} on "
                f"{envelope.event_type} {envelope.event_id} (seq {envelope.seq}) of chain "
                f"{chain}") from exc
        if hit:
            previous = resolved.get(chain)
            if previous is None or envelope.time < previous.time:
                resolved[chain] = envelope
    out: dict[str, timedelta] = {}
    for chain, end in resolved.items():
        start = started.get(chain) or earliest[chain]
        out[chain] = max(timedelta(0), end.time - start.time)
    return out


async def time_to_resolution(
    source: LogSource, *, resolves: Callable[[Envelope], bool],
) -> dict[str, timedelta]:
    """For each resolved chain, how long from its first event to the event that resolved it."""
    return fold_time_to_resolution(await envelopes_of(source), resolves)

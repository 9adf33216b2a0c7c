"""Scores routed per tenant (streams.core.sinks.routed): each tenant's scores reach its own
sink only, a tenant without one has its scores refused with the configured reason, and a
failing tenant's sink fails the batch (retried whole)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import pytest

from streams.core.errors import SinkError
from streams.core.scores import Score
from streams.core.sinks.contracts import check_score_sink, sample_scores
from streams.core.sinks.memory import InMemoryScoreSink
from streams.core.sinks.routed import TenantRouted

UNROUTED = "tenant {tenant!r} has no project"


@pytest.fixture
def scores_of() -> Callable[[str, str], list[Score]]:
    """A factory of sample scores of one tenant (a run id keeps batches apart)."""
    def make(tenant: str, run: str = "1") -> list[Score]:
        return [dataclasses.replace(s, source=dataclasses.replace(s.source, tenant=tenant))
                for s in sample_scores(run)]
    return make


async def test_each_tenants_scores_reach_its_own_sink_only(
        scores_of: Callable[[str, str], list[Score]]) -> None:
    acme, beta = InMemoryScoreSink(), InMemoryScoreSink()
    routed = TenantRouted({"acme": acme, "beta": beta}, unrouted=UNROUTED)
    refused = await routed.record([*scores_of("acme", "1"), *scores_of("beta", "2"),
                                   *scores_of("gamma", "3")])
    assert {s.source.tenant for s in acme.scores.values()} == {"acme"}
    assert {s.source.tenant for s in beta.scores.values()} == {"beta"}
    assert len(acme.scores) == len(beta.scores) == len(scores_of("x", "1"))
    assert {r.score.source.tenant for r in refused} == {"gamma"}
    assert {r.reason for r in refused} == {"tenant 'gamma' has no project"}
    await routed.flush()
    assert acme.flushes == beta.flushes == 1
    assert routed.identity.startswith("per-tenant:acme=")


async def test_a_failing_tenants_sink_fails_the_whole_batch(
        scores_of: Callable[[str, str], list[Score]]) -> None:
    class Down(InMemoryScoreSink):
        async def record(self, scores: Sequence[Score], /) -> list[object]:  # type: ignore[override]
            raise SinkError("langfuse answered 503")

    routed = TenantRouted({"acme": InMemoryScoreSink(), "beta": Down()}, unrouted=UNROUTED)
    with pytest.raises(SinkError, match="503"):
        await routed.record([*scores_of("acme", "1"), *scores_of("beta", "2")])


async def test_a_routed_sink_meets_the_sink_contract() -> None:
    inner = InMemoryScoreSink()
    routed = TenantRouted({"contract": inner}, unrouted=UNROUTED)

    async def stored() -> set[tuple[str, str, str]]:
        return set(inner.scores)

    await check_score_sink(routed, stored=stored)

"""Scores routed per tenant: each tenant's scores go to that tenant's own sink, never to
another's.

Langfuse's unit of tenancy is the project, with its own keys, so a sink process serving
many tenants holds one Langfuse sink per tenant and hands each its tenant's scores
(`TenantRouted`). A tenant with no sink of its own has its scores refused with a reason that
says what to configure: the runner dead-letters them in that tenant's dead-letter topic and
counts them (`streams_sink_errors_total{kind="rejected"}`), so nothing is lost and nothing
reaches another tenant's project.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from streams.core.scores import Score
from streams.core.sinks.base import Rejected, ScoreSink, flush_sink, rejected_of

__all__ = ["TenantRouted"]


class TenantRouted:
    """A ScoreSink that hands each score to the sink of its tenant (`score.source.tenant`).

    `unrouted` is the reason a score of a tenant without a sink is refused with; `{tenant}`
    in it is replaced by the tenant. A batch's tenants are recorded concurrently; when one
    tenant's sink raises (SinkError: retry), the whole batch is retried, which the sinks'
    replace-by-id contract makes harmless for the tenants already recorded."""

    def __init__(self, sinks: Mapping[str, ScoreSink], *, unrouted: str,
                 identity: str | None = None) -> None:
        self.sinks = dict(sinks)
        self.unrouted = unrouted
        self.identity = identity or "per-tenant:" + ",".join(
            f"{tenant}={getattr(sink, 'identity', type(sink).__name__)}"
            for tenant, sink in sorted(self.sinks.items()))

    async def record(self, scores: Sequence[Score], /) -> Sequence[Rejected]:
        """Record each tenant's scores in its sink; refuse those of tenants without one."""
        batches: dict[str, list[Score]] = {}
        refused: list[Rejected] = []
        for score in scores:
            tenant = score.source.tenant
            if tenant in self.sinks:
                batches.setdefault(tenant, []).append(score)
            else:
                refused.append(Rejected(score, self.unrouted.format(tenant=tenant)))
        answers = await asyncio.gather(*(self.sinks[tenant].record(batch)
                                         for tenant, batch in batches.items()))
        for answer in answers:
            refused.extend(rejected_of(answer))
        return refused

    async def flush(self) -> None:
        """Flush every tenant's sink."""
        await asyncio.gather(*(flush_sink(sink) for sink in self.sinks.values()))

    async def aclose(self) -> None:
        """Close every tenant's sink that can be closed."""
        closes: list[Any] = [close() for sink in self.sinks.values()
                             if (close := getattr(sink, "aclose", None)) is not None]
        await asyncio.gather(*closes)

"""Langfuse adapters: scores through the SDK's synchronous batch call, and score configs.

The SDK's `create_score` queues scores and sends them from a background thread, logging
errors it does not report back; a sink that advances a Kafka cursor must know the answer, so
this one calls `api.scores.create` (POST /api/public/scores, a JSON array) and reads it:
202 means every score was accepted, 207 lists the rejected ones with the server's reasons.
Transport errors, 5xx and 429 raise SinkError (the runner retries, and does not advance).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

import httpx
from langfuse import Langfuse
from langfuse.api.commons.types.config_category import ConfigCategory
from langfuse.api.core.api_error import ApiError
from langfuse.api.scores.types.create_score_request import CreateScoreRequest

from streams.core.errors import SinkError
from streams.core.scores import Category, Score, ScoreConfig
from streams.core.sinks.base import Rejected

log = logging.getLogger(__name__)

# Langfuse's batch limits: at most this many scores per request.
MAX_BATCH = 100


def to_request(score: Score) -> CreateScoreRequest:
    """The SDK request of one score: deterministic id, the feedback's event time, source as
    metadata, on the target's trace or else its session."""
    return CreateScoreRequest(
        id=score.id, name=score.name, value=score.value, data_type=score.data_type,
        trace_id=score.trace_id, observation_id=score.observation_id,
        session_id=None if score.trace_id else score.session_id,
        timestamp=score.timestamp, comment=score.comment,
        metadata={**score.source.as_metadata(), **score.metadata},
    )


class LangfuseScoreSink:
    """A ScoreSink writing to Langfuse through its Python SDK."""

    def __init__(self, client: Langfuse, *, batch_size: int = MAX_BATCH,
                 timeout: float = 30.0, identity: str = "langfuse",
                 concurrency: int = 4) -> None:
        self.client = client
        self.identity = identity
        self.concurrency = max(1, concurrency)
        self.batch_size = min(batch_size, MAX_BATCH)
        self.timeout = timeout

    async def record(self, scores: Sequence[Score], /) -> Sequence[Rejected]:
        """Send scores in batches, up to `concurrency` requests at a time; returns the rejected
        ones, raises SinkError (after every request has answered) to retry the whole call."""
        batches = [list(scores[i:i + self.batch_size])
                   for i in range(0, len(scores), self.batch_size)]
        limit = asyncio.Semaphore(self.concurrency)

        async def send(batch: list[Score]) -> list[Rejected]:
            async with limit:
                return await self._send(batch)

        answers = await asyncio.gather(*(send(b) for b in batches), return_exceptions=True)
        rejected: list[Rejected] = []
        for answer in answers:
            if isinstance(answer, BaseException):
                raise answer
            rejected += answer
        return rejected

    async def _send(self, batch: list[Score]) -> list[Rejected]:
        try:
            answer = await self.client.async_api.scores.create(
                request=[to_request(s) for s in batch],
                # One attempt per call: the runner owns retries and knows not to commit.
                request_options={"max_retries": 0, "timeout_in_seconds": int(self.timeout)},
            )
        except ApiError as exc:
            status = exc.status_code or 0
            if status == 429 or status >= 500 or status == 0:
                raise SinkError(f"langfuse answered {status}: {exc.body}") from exc
            # Any other 4xx refuses the whole batch for good: dead-letter every score.
            return [Rejected(s, f"langfuse answered {status}: {exc.body}") for s in batch]
        except (httpx.TransportError, httpx.TimeoutException) as exc:
            raise SinkError(f"langfuse unreachable: {exc!r}") from exc
        return _rejections(answer, batch)

    async def flush(self) -> None:
        """Nothing is buffered: every record() call is answered before it returns."""


def _rejections(answer: Any, batch: list[Score]) -> list[Rejected]:
    errors = getattr(answer, "errors", None)
    if not errors:
        return []
    by_id = {s.id: s for s in batch}
    out: list[Rejected] = []
    for error in errors:
        message = getattr(error, "message", None) or str(error)
        index = getattr(error, "index", None)
        score_id = getattr(error, "id", None)
        if isinstance(index, int) and 0 <= index < len(batch):
            out.append(Rejected(batch[index], message))
        elif isinstance(score_id, str) and score_id in by_id:
            out.append(Rejected(by_id[score_id], message))
        else:
            log.warning("langfuse rejected a score it did not identify: %s", message)
    return out


class LangfuseScoreConfigStore:
    """A ScoreConfigStore over Langfuse's score configs."""

    def __init__(self, client: Langfuse) -> None:
        self.client = client

    async def list(self) -> Sequence[ScoreConfig]:
        """Every config, across pages."""
        out: list[ScoreConfig] = []
        page = 1
        while True:
            answer = await self.client.async_api.score_configs.get(page=page, limit=100)
            for item in answer.data:
                out.append(_from_langfuse(item))
            if page >= (answer.meta.total_pages or 1):
                return out
            page += 1

    async def create(self, config: ScoreConfig, /) -> None:
        """Create one config (Langfuse keeps duplicates: sync_score_configs lists first)."""
        kwargs: dict[str, Any] = {"name": config.name, "data_type": config.data_type}
        if config.data_type == "CATEGORICAL":
            kwargs["categories"] = [ConfigCategory(label=c.label, value=c.value)
                                    for c in config.categories]
        if config.data_type == "NUMERIC":
            if config.min_value is not None:
                kwargs["min_value"] = config.min_value
            if config.max_value is not None:
                kwargs["max_value"] = config.max_value
        if config.description:
            kwargs["description"] = config.description
        await self.client.async_api.score_configs.create(**kwargs)


def _from_langfuse(item: Any) -> ScoreConfig:
    data_type = str(getattr(item.data_type, "value", item.data_type))
    categories = () if data_type != "CATEGORICAL" else tuple(
        Category(label=c.label, value=float(c.value)) for c in (item.categories or []))
    name = str(item.name)
    return ScoreConfig(
        name=name, field=name.rpartition(".")[2], data_type=data_type,  # type: ignore[arg-type]
        categories=categories, min_value=item.min_value, max_value=item.max_value,
        description=item.description,
    )

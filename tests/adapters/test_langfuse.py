"""The Langfuse adapters against the Langfuse stand-in (an HTTP server, not Langfuse)."""

import uuid
from collections.abc import Iterator

import pytest
from langfuse import Langfuse

from streams.adapters.langfuse import LangfuseScoreConfigStore, LangfuseScoreSink
from streams.core.errors import SinkError
from streams.core.sinks.contracts import check_score_config_store, check_score_sink, sample_scores
from streams.testing.langfuse_standin import LangfuseStandIn


@pytest.fixture
def standin() -> Iterator[LangfuseStandIn]:
    with LangfuseStandIn() as server:
        yield server


@pytest.fixture
def client(standin: LangfuseStandIn) -> Langfuse:
    # The SDK keeps one resource manager per public key; a fresh key per test avoids reuse.
    standin_key = standin.public_key
    return Langfuse(public_key=standin_key, secret_key=standin.secret_key, host=standin.url,
                    tracing_enabled=False)


def _keys(standin: LangfuseStandIn) -> list[tuple[str, str, str]]:
    return [(s["id"], s["name"], s["timestamp"][:10]) for s in standin.scores()]


async def test_sink_meets_the_contract(standin: LangfuseStandIn, client: Langfuse) -> None:
    async def stored() -> list[tuple[str, str, str]]:
        return _keys(standin)

    await check_score_sink(LangfuseScoreSink(client), stored=stored)
    assert standin.received_total == 2 * len(sample_scores())
    assert len(standin.scores()) == len(sample_scores())


async def test_store_meets_the_contract(client: Langfuse) -> None:
    await check_score_config_store(LangfuseScoreConfigStore(client))


async def test_scores_carry_time_source_and_target(standin: LangfuseStandIn,
                                                    client: Langfuse) -> None:
    scores = sample_scores(uuid.uuid4().hex)
    assert await LangfuseScoreSink(client).record(scores) == []
    stored = {s["id"]: s for s in standin.scores()}
    on_trace = next(s for s in scores if s.trace_id)
    on_session = next(s for s in scores if not s.trace_id)
    assert stored[on_trace.id]["traceId"] == on_trace.trace_id
    assert "sessionId" not in stored[on_trace.id] or not stored[on_trace.id]["sessionId"]
    assert stored[on_session.id]["sessionId"] == on_session.session_id
    assert stored[on_trace.id]["timestamp"].startswith("2026-01-15T12:00:00")
    assert stored[on_trace.id]["metadata"]["participant"] == "user:contract"
    assert stored[on_trace.id]["metadata"]["feedback_event_id"] == \
        on_trace.source.feedback_event_id


async def test_partial_rejection_names_the_scores(standin: LangfuseStandIn,
                                                  client: Langfuse) -> None:
    scores = sample_scores(uuid.uuid4().hex)
    bad = {scores[0].id, scores[3].id}
    standin.reject_ids(bad, "over quota")
    rejected = await LangfuseScoreSink(client).record(scores)
    assert {r.score.id for r in rejected} == bad
    assert all("over quota" in r.reason for r in rejected)
    assert len(standin.scores()) == len(scores) - 2


@pytest.mark.parametrize("status", [503, 500, 429])
async def test_outage_statuses_raise_sink_error(standin: LangfuseStandIn, client: Langfuse,
                                                status: int) -> None:
    standin.fail_next(1, status=status)
    with pytest.raises(SinkError, match=str(status)):
        await LangfuseScoreSink(client).record(sample_scores())
    assert standin.scores() == []
    assert await LangfuseScoreSink(client).record(sample_scores()) == []


async def test_unreachable_raises_sink_error(standin: LangfuseStandIn) -> None:
    standin.stop()
    client = Langfuse(public_key=f"pk-{uuid.uuid4().hex}", secret_key="sk",
                      host=standin.url, tracing_enabled=False)
    with pytest.raises(SinkError, match="unreachable"):
        await LangfuseScoreSink(client, timeout=2).record(sample_scores())


async def test_bad_credentials_reject_the_batch(standin: LangfuseStandIn) -> None:
    client = Langfuse(public_key=f"pk-{uuid.uuid4().hex}", secret_key="wrong",
                      host=standin.url, tracing_enabled=False)
    rejected = await LangfuseScoreSink(client).record(sample_scores())
    assert len(rejected) == len(sample_scores())
    assert all("401" in r.reason for r in rejected)

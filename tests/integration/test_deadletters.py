"""`streams deadletters list | redrive` against the real broker: feedback the mirror refused,
its type fixed, re-driven -> scored exactly once; again -> nothing more; --dry-run writes
nothing; filters select exactly what they say."""

import asyncio
import json
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from streams.core.actors import UserActor
from streams.core.events import RunStarted
from streams.core.feedback import registry
from streams.core.targets import RunTarget
from streams.core.tenancy import tenant_topics
from streams.runtime.root import Runtime
from streams.settings import Settings
from streams.surfaces.cli.base import ExitCode
from streams.surfaces.cli.deadletters import NOT_ALL_REDRIVEN, NOTHING_MATCHES
from tests.conftest import REPO, WorkerProcess, read_topic

STRICT = "tests.integration.deadletters_strict"
FIXED = "tests.integration.deadletters_fixed"


@pytest.fixture
def latency() -> Iterator[Any]:
    """The fixed Latency type in this process (so give_feedback accepts what the strict
    worker refuses), forgotten afterwards."""
    from tests.integration.deadletters_fixed import Latency

    yield Latency
    registry.unregister("redrive_latency")


def dl(settings: Settings, *args: str, types: str = FIXED) -> subprocess.CompletedProcess[str]:
    """`streams deadletters ARGS`, in a child process with the test's settings."""
    return subprocess.run([sys.executable, "-m", "streams", "deadletters", *args],
                          env=settings.child_env(STREAMS_FEEDBACK_MODULES=types),
                          capture_output=True, text=True, cwd=str(REPO), timeout=180)


def lines(done: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]


def scored(settings: Settings, topic: str, at_least: int) -> Counter[str]:
    """Score records per feedback event id on the scores topic."""
    return Counter(r["source"]["feedback_event_id"]
                   for _m, r in read_topic(settings, topic, at_least=at_least, settle=2.0))


async def test_redrive_after_a_fix_scores_exactly_once_and_never_again(
    settings: Settings, tenant_factory: Callable[..., str],
    client_factory: Callable[..., Any], worker_factory: Callable[..., WorkerProcess],
    latency: Any,
) -> None:
    tenant = tenant_factory()
    topics = tenant_topics(tenant, settings.topic_prefix)
    ws = client_factory().workspace(tenant, "prod", actor=UserActor(id="ada"))
    await ws.append(RunStarted(run_id="run_1", rule="r", action="a", firing_id="fir_1"))
    good = await ws.give_feedback(latency(ms=10), on=RunTarget(run_id="run_1"))
    slow = [await ws.give_feedback(latency(ms=ms), on=RunTarget(run_id="run_1"))
            for ms in (5_000, 7_000)]
    producer = Producer({"bootstrap.servers": settings.bootstrap_servers})
    producer.produce(topics.events, value=b"not avro at all", key=b"junk",
                     headers=[("event_type", b"feedback_given")])
    producer.flush(10)
    # The worker runs the type as first deployed: it refuses 5,000 and 7,000 ms.
    worker_factory(types=STRICT)
    read_topic(settings, topics.deadletter, at_least=3)
    assert scored(settings, topics.scores, 1) == {good.id: 1}

    # list: every letter, and each filter exactly what it says.
    listed = lines(dl(settings, "list", "--tenant", tenant, "--json"))
    assert Counter(letter["kind"] for letter in listed) == {"invalid": 2, "undecodable": 1}
    assert not any(letter["redriven"] for letter in listed)
    invalid = [letter for letter in listed if letter["kind"] == "invalid"]
    assert all("redrive_latency" in letter["reason"] for letter in invalid)
    assert [x["at"] for x in lines(dl(settings, "list", "--tenant", tenant, "--json",
                                      "--kind", "invalid"))] == [x["at"] for x in invalid]
    assert [x["key"] for x in lines(dl(settings, "list", "--tenant", tenant, "--json",
                                       "--reason", "NOT CONFLUENT"))] == ["junk"]
    first = invalid[0]
    source_topic, partition, offset = first["source"].rsplit(":", 2)
    assert [x["at"] for x in lines(dl(
        settings, "list", "--tenant", tenant, "--json", "--source",
        f"{source_topic}:{partition}", "--from-offset", offset, "--to-offset", offset,
        "--stage", "mirror"))] == [first["at"]]
    assert len(lines(dl(settings, "list", "--tenant", tenant, "--json", "--limit", "1"))) == 1
    table = dl(settings, "list", "--tenant", tenant)
    assert table.returncode == 0 and f"{topics.deadletter}: 3 of 3" in table.stdout
    future = dl(settings, "list", "--tenant", tenant, "--since", "2999-01-01")
    assert future.returncode == NOTHING_MATCHES
    assert "no dead letter of" in future.stderr and "matches the filters (3 in all;" in \
        future.stderr

    # --dry-run says what it would do and writes nothing, not even the redriven topic.
    dry = dl(settings, "redrive", "--tenant", tenant, "--kind", "invalid", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert [(x["outcome"], x.get("records")) for x in lines(dry)[:-1]] == \
        [("would_redrive", 1)] * 2
    assert lines(dry)[-1]["summary"]["would_redrive"] == 2
    assert scored(settings, topics.scores, 1) == {good.id: 1}
    admin = AdminClient({"bootstrap.servers": settings.bootstrap_servers})
    assert f"{settings.topic_prefix}.{tenant}.redriven" not in admin.list_topics(timeout=10).topics

    # Before the fix: the mirror still refuses them; nothing written, exit 4.
    unfixed = dl(settings, "redrive", "--tenant", tenant, "--kind", "invalid", types=STRICT)
    assert unfixed.returncode == NOT_ALL_REDRIVEN, unfixed.stderr
    assert [x["outcome"] for x in lines(unfixed)[:-1]] == ["not_redriven"] * 2
    assert all("the mirror still refuses it: invalid redrive_latency value" in x["why"]
               for x in lines(unfixed)[:-1])
    assert scored(settings, topics.scores, 1) == {good.id: 1}

    # After the fix: one chosen letter, then the rest of the kind.
    one = dl(settings, "redrive", "--tenant", tenant, "--at", first["at"], "--types", FIXED)
    assert one.returncode == 0, one.stderr
    assert [(x["at"], x["outcome"]) for x in lines(one)[:-1]] == [(first["at"], "redriven")]
    rest = dl(settings, "redrive", "--tenant", tenant, "--kind", "invalid")
    assert rest.returncode == 0, rest.stderr
    assert sorted(x["outcome"] for x in lines(rest)[:-1]) == ["redriven", "redriven_before"]
    counts = scored(settings, topics.scores, 3)
    assert counts == {good.id: 1, slow[0].id: 1, slow[1].id: 1}
    # The scores are the mirror's own: value, and seq the original partition and offset.
    scores = {r["source"]["feedback_event_id"]: (m, r)
              for m, r in read_topic(settings, topics.scores, at_least=3)}
    for letter in invalid:
        msg, score = next(pair for pair in scores.values()
                          if pair[1]["source"]["seq"] == ":".join(
                              letter["source"].rsplit(":", 2)[1:]))
        assert score["numeric_value"] in (5_000.0, 7_000.0)
        assert dict(msg.headers())["redriven_from"] == \
            f"{topics.deadletter}:{letter['at']}".encode()

    # Again: nothing more.
    again = dl(settings, "redrive", "--tenant", tenant, "--kind", "invalid")
    assert again.returncode == 0, again.stderr
    assert [x["outcome"] for x in lines(again)[:-1]] == ["redriven_before"] * 2
    assert lines(again)[-1]["summary"]["records"] == 0
    assert scored(settings, topics.scores, 3) == counts
    assert {x["at"]: x["redriven"] for x in lines(dl(settings, "list", "--tenant", tenant,
                                                     "--json"))} == \
        {x["at"]: x["kind"] == "invalid" for x in listed}

    # The undecodable record cannot be re-driven by a fix of a type: exit 4, said why.
    junk = dl(settings, "redrive", "--tenant", tenant, "--kind", "undecodable")
    assert junk.returncode == NOT_ALL_REDRIVEN
    assert "not Confluent-framed" in lines(junk)[0]["why"]
    assert scored(settings, topics.scores, 3) == counts


def test_unknown_tenant_and_bad_filters_are_refused_saying_what_to_fix(
        settings: Settings, tenant_factory: Callable[..., str]) -> None:
    empty = tenant_factory()
    none = dl(settings, "redrive", "--tenant", empty)
    assert none.returncode == NOTHING_MATCHES
    assert f"{settings.topic_prefix}.{empty}.deadletter has no dead letters" in none.stderr
    missing = dl(settings, "list", "--tenant", "no-such-tenant")
    assert missing.returncode == ExitCode.NOT_FOUND
    assert "no tenant 'no-such-tenant'" in missing.stderr
    assert "streams tenant list" in missing.stderr
    bad = dl(settings, "redrive", "--tenant", "no-such-tenant", "--at", "x")
    assert bad.returncode == 2 and "PARTITION:OFFSET" in bad.stderr
    when = dl(settings, "list", "--tenant", "no-such-tenant", "--since", "yesterday")
    assert when.returncode == 2 and "is not an ISO 8601 time" in when.stderr


async def test_sink_letters_are_republished_once_and_the_sink_takes_them_after_the_fix(
    settings: Settings, tenant_factory: Callable[..., str],
    standin_factory: Callable[[], Any],
) -> None:
    from streams.adapters.langfuse import LangfuseScoreSink
    from streams.runtime.sink.runner import SinkRunner
    from tests.integration.test_sinks import client_for, make_scores, produce_scores

    tenant = tenant_factory()
    topics = tenant_topics(tenant, settings.topic_prefix)
    scores = make_scores(tenant, 5)
    produce_scores(settings, tenant, scores)
    standin = standin_factory()
    refused = {scores[1].id, scores[3].id}
    standin.reject_ids(refused, "no thanks")
    # A cursor of this test's own: the runner reads every tenant's scores topic, and a group
    # shared with other tests (or other tenants' topics left on the stack) would hand it
    # records that are not this test's.
    cursor = f"lf-{tenant}"
    ours = {s.id for s in scores}

    def ours_in_standin() -> set[str]:
        return {s["id"] for s in standin.scores()} & ours

    runner = SinkRunner(Runtime(settings), LangfuseScoreSink(client_for(standin)),
                        cursor=cursor)
    await asyncio.wait_for(runner.run(
        until=lambda s: s.per_tenant.get(tenant, 0) >= 3 and s.rejected >= 2), 120)
    assert ours_in_standin() == ours - refused
    read_topic(settings, topics.deadletter, at_least=2)

    standin.reject_ids(None)  # the fix: the sink takes them now
    done = dl(settings, "redrive", "--tenant", tenant, "--stage", f"sink:{cursor}")
    assert done.returncode == 0, done.stderr
    assert [(x["outcome"], x["action"], x["destination"]) for x in lines(done)[:-1]] == \
        [("redriven", "republish", topics.scores)] * 2
    again = dl(settings, "redrive", "--tenant", tenant, "--stage", "sink:")
    assert again.returncode == 0, again.stderr
    assert [x["outcome"] for x in lines(again)[:-1]] == ["redriven_before"] * 2
    # The scores topic holds each refused score once more, not twice more.
    on_topic = Counter(r["id"] for _m, r in read_topic(settings, topics.scores, at_least=7,
                                                       settle=2.0))
    assert on_topic == {s.id: 2 if s.id in refused else 1 for s in scores}

    runner = SinkRunner(Runtime(settings), LangfuseScoreSink(client_for(standin)),
                        cursor=cursor)
    await asyncio.wait_for(runner.run(until=lambda s: s.per_tenant.get(tenant, 0) >= 2), 120)
    assert ours_in_standin() == ours

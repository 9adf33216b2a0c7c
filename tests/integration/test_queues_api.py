"""Annotation queues over REST and MCP (streamable HTTP), on the real broker: installed,
listed and archived as the key's actor; refusals as error frames naming the JSON path; a
queue another writer installs is listed at once (the server follows the queues topic);
reviewers lease, submit and skip items of runs, firings and chains, and of runs a judge
scored low or a person disputes."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult

from streams.core.actors import EvaluatorActor, UserActor
from streams.core.events import AppEvent, RuleFired
from streams.core.judges import WorkflowReview
from streams.core.targets import RunTarget
from streams.examples.ops import TriageQuality
from streams.runtime.jobs.queues import QueueBook
from streams.settings import Settings
from tests.integration.served import serve, start_run

MANAGER = frozenset({"read", "manage_queues"})


def a_queue(**changes: Any) -> dict[str, Any]:
    """A queue of a rule's runs, two blind reviewers each, with `changes`."""
    return {"name": "triage-review", "enters": {"runs_of": "ops:wrong-triage"},
            "feedback_types": ["triage_quality"], "reviewers": 2, "blind": True, **changes}


def _error(answer: httpx.Response, status: int, code: str) -> str:
    assert answer.status_code == status, answer.text
    body = answer.json()
    assert body["type"] == "error" and body["error"]["code"] == code, body
    return str(body["error"]["message"])


async def test_install_list_archive_over_rest(settings: Settings,
                                              tenant_factory: Callable[..., str]) -> None:
    tenant = tenant_factory()
    async with serve(settings) as served:
        base = f"{served.url}/v1/workspaces/{tenant}.prod/queues"
        manager = {"Authorization": f"Bearer {served.key(tenant, 'ada', MANAGER)}"}
        reader = {"Authorization": f"Bearer {served.key(tenant, 'rita', frozenset({'read'}))}"}
        async with httpx.AsyncClient(timeout=30) as http:
            # Reading needs `read`; installing needs `manage_queues`.
            assert (await http.get(base, headers=reader)).json() == {"queues": []}
            assert "manage_queues" in _error(
                await http.post(base, json=a_queue(), headers=reader), 403, "forbidden")

            first = await http.post(base, json=a_queue(), headers=manager)
            assert first.status_code == 201, first.text
            installed = first.json()
            assert installed["repeat"] is False
            queue = installed["queue"]
            assert (queue["queue"], queue["state"], queue["installed_by"]) == \
                ("triage-review", "installed", "user:ada")
            assert queue["definition"]["lease_seconds"] == 900.0  # defaults spelled out
            # The same definition again: 200, nothing written.
            again = await http.post(base, json=queue["definition"], headers=manager)
            assert again.status_code == 200 and again.json()["repeat"] is True
            assert again.json()["queue"]["installed_at_ms"] == queue["installed_at_ms"]
            # Another definition under the live name: 409, saying what to do.
            assert "archive it first" in _error(
                await http.post(base, json=a_queue(reviewers=3), headers=manager),
                409, "conflict")

            # Refusals name the JSON path; nothing is written.
            for body, says in [
                (a_queue(feedback_types=["resolution"]), "$.feedback_types[0]"),
                (a_queue(feedback_types=["nope"]), "no feedback type 'nope'"),
                (a_queue(reviewers=0), "$.reviewers"),
                ({"enters": {"chains": {}}}, "'name' is a required property"),
            ]:
                assert says in _error(await http.post(base, json=body, headers=manager),
                                      422, "validation_failed")
            assert "not JSON" in _error(await http.post(
                base, content=b"{nope", headers={**manager, "Content-Type":
                                                 "application/json"}),
                422, "validation_failed")

            listed = (await http.get(base, headers=reader)).json()["queues"]
            assert [q["queue"] for q in listed] == ["triage-review"]

            archived = await http.post(f"{base}/triage-review/archive", headers=manager)
            assert archived.status_code == 200, archived.text
            assert archived.json()["queue"]["state"] == "archived"
            assert archived.json()["queue"]["archived_by"] == "user:ada"
            assert "no live queue 'triage-review'" in _error(
                await http.post(f"{base}/triage-review/archive", headers=manager),
                404, "not_found")
            assert (await http.get(base, headers=reader)).json() == {"queues": []}
            every = (await http.get(base, params={"archived": "true"},
                                    headers=reader)).json()["queues"]
            assert [q["state"] for q in every] == ["archived"]
            # Archived, the name takes a new definition.
            assert (await http.post(base, json=a_queue(reviewers=3),
                                    headers=manager)).status_code == 201


async def test_a_queue_another_writer_installs_is_listed_at_once(
        settings: Settings, tenant_factory: Callable[..., str]) -> None:
    # The server follows the tenant's queues topic: a queue written by another process (the
    # CLI's one-off QueueBook here) is in the very next list, as is each of its own writes.
    tenant = tenant_factory()
    async with serve(settings) as served:
        base = f"{served.url}/v1/workspaces/{tenant}.prod/queues"
        headers = {"Authorization": f"Bearer {served.key(tenant, 'ada', MANAGER)}"}
        async with httpx.AsyncClient(timeout=30) as http:
            assert (await http.post(base, json=a_queue(), headers=headers)).status_code == 201
            book = QueueBook(served.client.runtime)  # not following: reads, then writes
            for n in range(5):
                await book.install(tenant, "prod", a_queue(name=f"other-{n}"),
                                   actor=UserActor(id="cli"))
                names = [q["queue"] for q in
                         (await http.get(base, headers=headers)).json()["queues"]]
                assert f"other-{n}" in names, names
            assert len(names) == 6


def _frame(result: CallToolResult) -> dict[str, Any]:
    assert result.structured_content is not None
    [text] = result.content
    assert json.loads(text.text) == result.structured_content  # type: ignore[union-attr]
    return dict(result.structured_content)


async def test_the_queue_tools_over_mcp(settings: Settings,
                                        tenant_factory: Callable[..., str]) -> None:
    tenant = tenant_factory()
    wid = f"{tenant}.prod"
    async with serve(settings) as served:
        token = served.key(tenant, "ada", MANAGER | {"give_feedback"})
        headers = {"Authorization": f"Bearer {token}"}
        transport = streamable_http_client(served.mcp, http_client=httpx2.AsyncClient(
            headers=headers, timeout=30.0))
        async with Client(transport) as mcp:
            made = await mcp.call_tool("install_queue", {"workspace_id": wid,
                                                         "definition": a_queue()})
            assert not made.is_error, _frame(made)
            assert _frame(made)["repeat"] is False
            listed = _frame(await mcp.call_tool("list_queues", {"workspace_id": wid}))
            assert [q["queue"] for q in listed["queues"]] == ["triage-review"]
            clash = await mcp.call_tool("install_queue", {"workspace_id": wid,
                                                          "definition": a_queue(reviewers=5)})
            assert clash.is_error and _frame(clash)["error"]["code"] == "conflict"
            bad = await mcp.call_tool("install_queue", {
                "workspace_id": wid, "definition": a_queue(feedback_types=["resolution"])})
            assert bad.is_error and "$.feedback_types[0]" in _frame(bad)["error"]["message"]
            gone = _frame(await mcp.call_tool("archive_queue", {"workspace_id": wid,
                                                                "name": "triage-review"}))
            assert gone["queue"]["state"] == "archived"
            missing = await mcp.call_tool("archive_queue", {"workspace_id": wid,
                                                            "name": "triage-review"})
            assert missing.is_error and _frame(missing)["error"]["code"] == "not_found"

            # A reviewer's round: next, submit (recorded once), skip, nothing left.
            await start_run(served.client.workspace(tenant, "prod"), "run_a")
            await start_run(served.client.workspace(tenant, "prod"), "run_b")
            spikes = {"name": "spikes", "enters": {"runs_of": "ops:error-spike"},
                      "feedback_types": ["triage_quality"]}
            assert not (await mcp.call_tool("install_queue", {
                "workspace_id": wid, "definition": spikes})).is_error
            lease = _frame(await mcp.call_tool("next_item", {"workspace_id": wid,
                                                             "queue": "spikes"}))["lease"]
            assert lease["item"] == "run:run_b"
            verdict = {"workspace_id": wid, "queue": "spikes",
                       "request_id": lease["request_id"], "feedback_type": "triage_quality",
                       "target": lease["target"],
                       "value": {"correct": True, "severity": "low"}}
            done = await mcp.call_tool("submit_item", verdict)
            assert not done.is_error and _frame(done)["outcome"]["type"] == "recorded"
            assert _frame(await mcp.call_tool("submit_item", verdict)) == _frame(done)
            other = _frame(await mcp.call_tool("next_item", {"workspace_id": wid,
                                                             "queue": "spikes"}))["lease"]
            assert other["item"] == "run:run_a"
            assert _frame(await mcp.call_tool("skip_item", {
                "workspace_id": wid, "queue": "spikes", "item": other["item"],
                "request_id": other["request_id"]})) == {"outcome": "skipped"}
            assert _frame(await mcp.call_tool("next_item", {
                "workspace_id": wid, "queue": "spikes"})) == {"lease": None}
            assert _frame(await mcp.call_tool("queue_progress", {
                "workspace_id": wid, "queue": "spikes"})) == {
                "queue": "spikes", "items": 2, "done": 1, "in_review": 0, "left": 1,
                "verdicts": 1}
            late = await mcp.call_tool("skip_item", {
                "workspace_id": wid, "queue": "spikes", "item": other["item"],
                "request_id": other["request_id"]})
            assert late.is_error and _frame(late)["error"]["code"] == "conflict"


def _auth(served: Any, tenant: str, who: str,
          capabilities: frozenset[str] | None = None) -> dict[str, str]:
    token = served.key(tenant, who) if capabilities is None else \
        served.key(tenant, who, capabilities)
    return {"Authorization": f"Bearer {token}"}


async def _three_spikes(served: Any, tenant: str) -> tuple[str, dict[str, Any]]:
    """Three runs of ops:error-spike (run_0 oldest) and the queue "spikes" of its runs,
    k = 1, installed by a manager: (the queues' base URL, the queue's definition)."""
    ws = served.client.workspace(tenant, "prod")
    for n in range(3):
        await start_run(ws, f"run_{n}")
    base = f"{served.url}/v1/workspaces/{tenant}.prod/queues"
    queue = {"name": "spikes", "enters": {"runs_of": "ops:error-spike"},
             "feedback_types": ["triage_quality"], "reviewers": 1}
    async with httpx.AsyncClient(timeout=30) as http:
        installed = await http.post(base, json=queue,
                                    headers=_auth(served, tenant, "root", MANAGER))
        assert installed.status_code == 201, installed.text
    return base, queue


async def test_reviewers_lease_submit_and_skip_over_rest(
        settings: Settings, tenant_factory: Callable[..., str]) -> None:
    tenant = tenant_factory()
    async with serve(settings) as served:
        ws = served.client.workspace(tenant, "prod")
        base, _queue = await _three_spikes(served, tenant)
        admin = _auth(served, tenant, "root", MANAGER)
        ada, bo = _auth(served, tenant, "ada"), _auth(served, tenant, "bo")
        rita = _auth(served, tenant, "rita", frozenset({"read"}))
        async with httpx.AsyncClient(timeout=30) as http:
            _error(await http.post(f"{base}/spikes/next", headers=rita), 403, "forbidden")

            first = (await http.post(f"{base}/spikes/next", headers=ada)).json()["lease"]
            assert first["item"] == "run:run_2"  # newest first
            assert first["target"] == {"kind": "run", "run_id": "run_2"}
            # Asking again gives the lease ada holds; bo gets another run (k = 1).
            assert (await http.post(f"{base}/spikes/next", headers=ada)).json()["lease"] == \
                first
            second = (await http.post(f"{base}/spikes/next", headers=bo)).json()["lease"]
            assert second["item"] == "run:run_1"

            verdict = {"type": "give_feedback", "feedback_type": "triage_quality",
                       "target": first["target"],
                       "value": {"correct": False, "severity": "high"}}
            url = f"{base}/spikes/submit"
            done = await http.post(url, json={"request_id": first["request_id"],
                                              "command": verdict}, headers=ada)
            assert done.status_code == 200, done.text
            assert done.json()["outcome"]["type"] == "recorded"
            # A retry answers the same outcome; another value under the lease conflicts.
            again = await http.post(url, json={"request_id": first["request_id"],
                                               "command": verdict}, headers=ada)
            assert again.json() == done.json()
            other = {**verdict, "value": {"correct": True, "severity": "low"}}
            _error(await http.post(url, json={"request_id": first["request_id"],
                                              "command": other}, headers=ada), 409, "conflict")
            # A lease that is not running, a type the queue does not take: nothing recorded.
            assert "not running" in _error(await http.post(url, json={
                "request_id": "lease_" + "0" * 32,
                "command": {**verdict, "target": second["target"]}}, headers=ada),
                409, "conflict")
            proposal = {"type": "give_feedback", "feedback_type": "proposal_outcome",
                        "target": second["target"],
                        "value": {"proposal_id": "p1", "outcome": "accepted"}}
            assert "takes ['triage_quality']" in _error(await http.post(url, json={
                "request_id": second["request_id"], "command": proposal}, headers=bo),
                409, "conflict")

            # bo gives run_1 back and gets run_0; run_1 goes to someone else.
            skipped = await http.post(f"{base}/spikes/skip", json={
                "item": second["item"], "request_id": second["request_id"]}, headers=bo)
            assert skipped.json() == {"outcome": "skipped"}, skipped.text
            third = (await http.post(f"{base}/spikes/next", headers=bo)).json()["lease"]
            assert third["item"] == "run:run_0"
            cy = {"Authorization": f"Bearer {served.key(tenant, 'cy')}"}
            assert (await http.post(f"{base}/spikes/next", headers=cy)).json()["lease"][
                "item"] == "run:run_1"
            # ada submitted run_2, the others are held: nothing left for her.
            assert (await http.post(f"{base}/spikes/next", headers=ada)).json() == \
                {"lease": None}

            # An archived queue hands out nothing.
            await http.post(f"{base}/spikes/archive", headers=admin)
            assert "archived" in _error(await http.post(f"{base}/spikes/next", headers=bo),
                                        404, "not_found")
    given = [e for e in await ws.feedback()]
    assert [(e.actor.participant, e.event.target.id) for e in given] == [("user:ada", "run_2")]


async def test_firings_and_chains_are_leased_and_judged_over_rest(
        settings: Settings, tenant_factory: Callable[..., str]) -> None:
    tenant = tenant_factory()
    async with serve(settings) as served:
        ws = served.client.workspace(tenant, "prod")
        heads = []
        for n in range(2):
            spike = await ws.append(AppEvent(name="ops:error_spike", data={}))
            await ws.append(RuleFired(firing_id=f"fir_{n}", rule="ops:error-spike",
                                      matched=[spike.id]),
                            correlation_id=spike.id, causation_id=spike.id)
            heads.append(spike.id)
        # A firing of another rule, and an app event inside a chain: neither is offered.
        await ws.append(RuleFired(firing_id="fir_other", rule="ops:other", matched=[heads[0]]),
                        correlation_id=heads[0], causation_id=heads[0])
        await ws.append(AppEvent(name="ops:error_spike", data={}), correlation_id=heads[1],
                        causation_id=heads[1])
        base = f"{served.url}/v1/workspaces/{tenant}.prod/queues"
        admin = {"Authorization": f"Bearer {served.key(tenant, 'root', MANAGER)}"}
        ada = {"Authorization": f"Bearer {served.key(tenant, 'ada')}"}
        queues = [
            ({"name": "firings", "enters": {"firings_of": "ops:error-spike"},
              "feedback_types": ["should_have_fired"]},
             [("firing", "firing_id", f"fir_{n}") for n in (1, 0)], {"fired_rightly": True}),
            ({"name": "chains", "enters": {"chains": {}}, "feedback_types": ["resolution"]},
             [("chain", "correlation_id", h) for h in reversed(heads)], {"resolved": True}),
        ]
        async with httpx.AsyncClient(timeout=30) as http:
            for queue, expected, value in queues:
                name = queue["name"]
                answer = await http.post(base, json=queue, headers=admin)
                assert answer.status_code == 201, answer.text
                for kind, field, target_id in expected:  # newest first, then none left
                    lease = (await http.post(f"{base}/{name}/next", headers=ada)).json()[
                        "lease"]
                    assert lease["item"] == f"{kind}:{target_id}"
                    assert lease["target"] == {"kind": kind, field: target_id}
                    done = await http.post(f"{base}/{name}/submit", headers=ada, json={
                        "request_id": lease["request_id"],
                        "command": {"type": "give_feedback",
                                    "feedback_type": queue["feedback_types"][0],
                                    "target": lease["target"], "value": value}})
                    assert done.status_code == 200, done.text
                    assert done.json()["outcome"]["type"] == "recorded"
                assert (await http.post(f"{base}/{name}/next", headers=ada)).json() == \
                    {"lease": None}
            # What the page shows of a firing and of a chain.
            where = f"{served.url}/v1/workspaces/{tenant}.prod"
            firing = (await http.get(f"{where}/firings/fir_0", headers=ada)).json()
            assert firing["firing"]["event"]["rule"] == "ops:error-spike"
            assert [e["event_id"] for e in firing["matched"]] == [heads[0]]
            assert firing["runs"] == []
            chain = (await http.get(f"{where}/chains/{heads[1]}", headers=ada)).json()
            # The spike, its firing, the spike within the chain, and ada's verdicts on the
            # firing and on the chain.
            assert [e["event_type"] for e in chain["events"]] == [
                "ops:error_spike", "rule_fired", "ops:error_spike", "feedback_given",
                "feedback_given"]
            assert chain["count"] == 5
            for missing in ("firings/fir_nope", "chains/evt_nope"):
                answer = await http.get(f"{where}/{missing}", headers=ada)
                assert answer.status_code == 404, answer.text
                assert answer.json()["error"]["code"] == "not_found"
    given = await ws.feedback()
    assert sorted((e.event.feedback_type, e.event.target.id) for e in given) == sorted(
        [("should_have_fired", "fir_0"), ("should_have_fired", "fir_1"),
         ("resolution", heads[0]), ("resolution", heads[1])])


async def test_runs_a_judge_scored_low_or_people_dispute_are_leased(
        settings: Settings, tenant_factory: Callable[..., str]) -> None:
    tenant = tenant_factory()
    async with serve(settings) as served:
        ws = served.client.workspace(tenant, "prod")
        for n in range(4):
            await start_run(ws, f"run_{n}")
        judge = ws.as_actor(EvaluatorActor(name="judge", version="1"))
        person = ws.as_actor(UserActor(id="ada"))
        for n, score in enumerate([0.2, 0.9, 0.1, 0.4]):
            await judge.give_feedback(
                WorkflowReview(approved=score > 0.5, quality_score=score, issues=[],
                               recommendation="-"), on=RunTarget(run_id=f"run_{n}"))
        for n, (judged, said) in enumerate([(True, True), (True, False), (False, True)]):
            await judge.give_feedback(TriageQuality(correct=judged, severity="low"),
                                      on=RunTarget(run_id=f"run_{n}"))
            await person.give_feedback(TriageQuality(correct=said, severity="low",
                                                     note=f"n{n}"),
                                       on=RunTarget(run_id=f"run_{n}"))
        base = f"{served.url}/v1/workspaces/{tenant}.prod/queues"
        admin = {"Authorization": f"Bearer {served.key(tenant, 'root', MANAGER)}"}
        bo = {"Authorization": f"Bearer {served.key(tenant, 'bo')}"}
        queues = [
            ({"name": "low", "enters": {"judged_below": {
                "evaluator": "judge", "feedback_type": "workflow_review",
                "field": "quality_score", "threshold": 0.5}},
              "feedback_types": ["workflow_review"]}, ["run_3", "run_2", "run_0"]),
            ({"name": "disputed", "enters": {"disagreements": {
                "evaluator": "judge@1", "feedback_type": "triage_quality"}},
              "feedback_types": ["triage_quality"]}, ["run_2", "run_1"]),
        ]
        async with httpx.AsyncClient(timeout=30) as http:
            for queue, expected in queues:
                answer = await http.post(base, json=queue, headers=admin)
                assert answer.status_code == 201, answer.text
                leased = []
                while lease := (await http.post(f"{base}/{queue['name']}/next",
                                                headers=bo)).json()["lease"]:
                    assert lease["target"] == {"kind": "run",
                                               "run_id": lease["item"].split(":", 1)[1]}
                    skipped = await http.post(f"{base}/{queue['name']}/skip", headers=bo,
                                              json={"item": lease["item"],
                                                    "request_id": lease["request_id"]})
                    assert skipped.json() == {"outcome": "skipped"}
                    leased.append(lease["target"]["run_id"])
                assert leased == expected  # the newest verdict first


async def test_the_next_item_is_leased_ahead_and_the_team_sees_progress(
        settings: Settings, tenant_factory: Callable[..., str]) -> None:
    # The page leases the item after the one it shows (besides=<shown>), so a turn waits for
    # the submit alone; a plain next still answers the items held, and k still holds.
    tenant = tenant_factory()
    async with serve(settings) as served:
        base, _queue = await _three_spikes(served, tenant)
        ada, bo = _auth(served, tenant, "ada"), _auth(served, tenant, "bo")
        async with httpx.AsyncClient(timeout=30) as http:
            progress = f"{base}/spikes/progress"
            assert (await http.get(progress, headers=ada)).json() == {
                "queue": "spikes", "items": 3, "done": 0, "in_review": 0, "left": 3,
                "verdicts": 0}
            shown = (await http.post(f"{base}/spikes/next", headers=ada)).json()["lease"]
            assert shown["item"] == "run:run_2"
            ahead = (await http.post(f"{base}/spikes/next", params={"besides": shown["item"]},
                                     headers=ada)).json()["lease"]
            assert ahead["item"] == "run:run_1"
            # Asked again, besides the shown item, it answers the lease it took ahead.
            assert (await http.post(f"{base}/spikes/next", params={"besides": shown["item"]},
                                    headers=ada)).json()["lease"] == ahead
            # k = 1: bo gets neither of ada's two.
            assert (await http.post(f"{base}/spikes/next", headers=bo)).json()["lease"][
                "item"] == "run:run_0"
            verdict = {"type": "give_feedback", "feedback_type": "triage_quality",
                       "target": shown["target"],
                       "value": {"correct": True, "severity": "low"}}
            done = await http.post(f"{base}/spikes/submit", json={
                "request_id": shown["request_id"], "command": verdict}, headers=ada)
            assert done.status_code == 200, done.text
            # run_2 done; run_1 (ada's, ahead) and run_0 (bo's) leased: in review.
            assert (await http.get(progress, headers=ada)).json() == {
                "queue": "spikes", "items": 3, "done": 1, "in_review": 2, "left": 0,
                "verdicts": 1}
            assert (await http.get(f"{base}/nope/progress", headers=ada)).status_code == 404
            # After the submit the plain next is the lease taken ahead.
            assert (await http.post(f"{base}/spikes/next", headers=ada)).json()["lease"] == \
                ahead
            bad = await http.post(f"{base}/spikes/next", params={"besides": "nothing"},
                                  headers=ada)
            assert bad.status_code == 422, bad.text
            assert bad.json()["error"]["fields"][0]["path"] == "query.besides"

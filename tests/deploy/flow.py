"""What every deployment test does once its processes run: runs appended to a tenant's log,
feedback given over REST to the API they serve, read back, and its scores found."""

from __future__ import annotations

from collections.abc import Callable

import httpx

from streams.core.actors import UserActor
from streams.core.events import AppEvent, RunStarted
from streams.core.tenancy import tenant_topics
from streams.runtime.client.keys import KeyStore
from streams.runtime.client.workspace import Workspace
from streams.runtime.root import Runtime
from streams.settings import Settings
from tests.conftest import read_topic, wait_until

__all__ = ["RUNS", "SCORES", "append_runs", "feedback_over_rest", "scores_of_feedback",
           "wait_ready"]

RUNS = 5
SCORES = RUNS * 2  # triage_quality: correct and severity (no note)


async def append_runs(ws: Workspace, runs: int = RUNS) -> None:
    """`runs` error spikes, each starting a triage run `run_<i>`."""
    for i in range(runs):
        spike = await ws.append(AppEvent(name="ops:error_spike"))
        await ws.append(RunStarted(run_id=f"run_{i}", rule="ops:error-spike",
                                   action="triage", firing_id=f"fir_{i}"),
                        correlation_id=spike.id, causation_id=spike.id)


def wait_ready(base: str, alive: Callable[[], None], what: str,
               why: Callable[[], str] | None = None) -> None:
    """Until the API at `base` answers /readyz 200; `alive` asserts its process still runs
    (and says why not). A timeout says what /readyz answered last, and `why()` (logs of the
    processes the API needs)."""
    last = ["nothing"]

    def ready() -> bool:
        alive()
        try:
            answer = httpx.get(f"{base}/readyz", timeout=3.0)
        except httpx.HTTPError as exc:
            last[0] = repr(exc)
            return False
        last[0] = f"{answer.status_code} {answer.text[:2000]}"
        return answer.status_code == 200

    try:
        wait_until(ready, 180, what, every=1.0)
    except BaseException as exc:  # pytest's Failed is a BaseException
        raise AssertionError(f"{what}: /readyz answered {last[0]}"
                             + (f"\n{why()}" if why is not None else "")) from exc


async def feedback_over_rest(base: str, settings: Settings, tenant: str,
                             runs: int = RUNS) -> list[str]:
    """A key for ada, then one triage_quality feedback per run given as a REST command to the
    API at `base`; asserts the feedback reads back over REST; returns the feedback ids."""
    store = KeyStore(Runtime(settings))
    store.start()
    try:
        _key, token = store.create(tenant, UserActor(id="ada"), {"give_feedback", "read"})
    finally:
        store.close()
    url = f"{base}/v1/workspaces/{tenant}.prod"
    given: list[str] = []
    async with httpx.AsyncClient(timeout=60, headers={"Authorization": f"Bearer {token}"}
                                 ) as http:
        for i in range(runs):
            answer = await http.post(f"{url}/commands", json={
                "type": "command", "command_id": f"fb_{i}",
                "command": {"type": "give_feedback", "feedback_type": "triage_quality",
                            "target": {"kind": "run", "run_id": f"run_{i}"},
                            "value": {"correct": i % 2 == 0, "severity": "high"}}})
            assert answer.status_code == 200, answer.text
            given.append(answer.json()["outcome"]["id"])
        read_back = await http.get(f"{url}/feedback", params={
            "feedback_type": "triage_quality", "participant": "user:ada"})
    assert read_back.status_code == 200, read_back.text
    assert sorted(f["event_id"] for f in read_back.json()["feedback"]) == sorted(given)
    return given


def scores_of_feedback(settings: Settings, tenant: str, given: list[str]) -> None:
    """The tenant's scores topic holds the two scores of each feedback in `given`, once."""
    topic = tenant_topics(tenant, settings.topic_prefix).scores
    scores = read_topic(settings, topic, at_least=len(given) * 2, timeout=180, settle=2.0)
    assert sorted({r["source"]["feedback_event_id"] for _m, r in scores}) == sorted(given)
    assert len(scores) == len(given) * 2

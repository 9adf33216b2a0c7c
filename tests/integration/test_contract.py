"""The contract as a test: Schemathesis, driven by the committed docs/openapi.json, against a
real `streams serve` on the real broker with a valid key.

The server loads the feedback types the committed document is generated with (the project's
shipped ones, `streams.adapters.avro.files.PROJECT_FEEDBACK_MODULES`) and must serve exactly
that document. Schemathesis then generates requests from it, valid and invalid, and checks
every answer: no server error, every status and body as the document declares, every request
the document calls valid accepted (not refused as invalid), every invalid one refused.

The test's copy of the document differs from the committed one in one place: the
`workspace_id` path parameter is the test's workspace only (a generated workspace id of
another tenant is only ever `forbidden`, which says nothing more about the contract).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from streams.adapters.avro.files import PROJECT_FEEDBACK_MODULES
from streams.core.actors import UserActor
from streams.runtime.client.keys import KeyStore
from streams.runtime.client.workspace import StreamsClient
from streams.runtime.jobs.queues import QueueBook
from tests.integration.conftest import REPO, Server
from tests.integration.served import start_run

DOC = REPO / "docs" / "openapi.json"

CHECKS = ",".join([
    "not_a_server_error",            # no 5xx: an unexpected error would be 503 unavailable
    "status_code_conformance",       # every status is one the operation declares
    "content_type_conformance",      # every answer is application/json, as declared
    "response_headers_conformance",
    "response_schema_conformance",   # every body valid by the declared schema
    "negative_data_rejection",       # a request the document calls invalid is refused (4xx)
    "positive_data_acceptance",      # a request the document calls valid is not refused 422
    "missing_required_header",
    "unsupported_method",            # another method on a path: 405 with Allow
    "ignored_auth",                  # without the key: 401, the key is not ignored
])
"""The checks on: every one Schemathesis has but the stateful ones about resources created
by the API (`use_after_free`, `ensure_resource_availability`: installing a queue creates
one, but no operation reads or deletes a queue by its id: the queues are read as a list, and
an archived queue stays listed) and `object_level_authorization` (it needs
two keys of different tenants per request pair; tests/integration/test_serve.py covers
another tenant's key on every route)."""

SEED = 20260401
MAX_EXAMPLES = 300


def _test_copy(document: dict[str, Any], workspace_id: str, ids: dict[str, list[str]],
               path: Path) -> Path:
    """The document with `workspace_id` restricted to the test's workspace and the targets'
    ids to `ids` (the test's run, firing and chain, and one that does not exist), written to
    `path`: random ids would only ever be `not_found`, and the recorded outcome, the pages of
    feedback, a run's record and a rule's why would go unchecked."""
    copy = json.loads(json.dumps(document))
    for item in copy["paths"].values():
        for operation in item.values():
            for parameter in operation.get("parameters", []):
                if parameter["in"] == "path" and parameter["name"] == "workspace_id":
                    parameter["schema"] = {"type": "string", "enum": [workspace_id]}
                if parameter["in"] == "path" and parameter["name"] in ("run_id", "rule",
                                                                        "event_id"):
                    parameter["schema"]["enum"] = ids[parameter["name"]]
    schemas = copy["components"]["schemas"]
    for target, field in (("RunTarget", "run_id"), ("FiringTarget", "firing_id"),
                          ("ChainTarget", "correlation_id")):
        schemas[target]["properties"][field]["enum"] = ids[field]
    path.write_text(json.dumps(copy, indent=2))
    return path


# Its own budget: 12 operations at 300 examples each took 114 s alone here and 300 s with the
# other CI groups on the same 2 cores (the suite's default timeout); the run inside is
# bounded at 840 s. (16 operations since the queue progress, firing, chain and why routes.)
@pytest.mark.timeout(900)
async def test_the_server_keeps_the_committed_contract(
        tenant_factory: Callable[..., str], client_factory: Callable[..., Any],
        serve_factory: Callable[..., Server], keys: KeyStore, tmp_path: Path) -> None:
    tenant = tenant_factory()
    client: StreamsClient = client_factory()
    chain = await start_run(client.workspace(tenant, "prod"))
    _k, token = keys.create(tenant, UserActor(id="ada"),
                            {"give_feedback", "read", "manage_queues"})
    server = serve_factory(STREAMS_FEEDBACK_MODULES=",".join(PROJECT_FEEDBACK_MODULES),
                           STREAMS_RULE_MODULES="streams.examples.ops_rules")
    committed = json.loads(DOC.read_text())
    served = (await asyncio.to_thread(httpx.get, f"{server.url}/openapi.json", timeout=30)).json()
    assert served == committed, "the server does not serve the committed document"

    ids = {"run_id": ["run_1", "run_nope"], "firing_id": ["fir_1"],
           "correlation_id": [chain, "evt_nope"],
           "rule": ["ops:error-spike", "ops:wrong-triage", "t:nope"],
           "event_id": [chain, "evt_nope"]}
    copy = _test_copy(committed, f"{tenant}.prod", ids, tmp_path / "openapi.json")
    report = tmp_path / "report.json"
    st = Path(sys.executable).with_name("st")
    # One worker: with 4, Schemathesis's threads compile ASTs at once (hypothesis describing
    # strategies, anyio's lazy importer), and CPython 3.11's AST recursion counter is not
    # per thread, so a run could end in "SystemError: AST constructor recursion depth
    # mismatch" (a CI run did, in the tester, not the server). About 44 s instead of 33 s.
    run = await asyncio.to_thread(
        subprocess.run,
        [str(st), "run", str(copy), "--url", server.url,
         "-H", f"Authorization: Bearer {token}",
         "--checks", CHECKS, "--max-examples", str(MAX_EXAMPLES), "--seed", str(SEED),
         "--generation-database", "none", "--workers", "1", "--no-color",
         "--continue-on-failure", "--report", "json", "--report-json-path", str(report),
         "--request-timeout", "30", "--max-failures", "200"],
        capture_output=True, text=True, cwd=tmp_path, timeout=840)
    output = run.stdout + run.stderr
    print(output)
    assert run.returncode == 0, output[-20000:]
    result = json.loads(report.read_text())
    assert result["failures"] == [] and result["errors"] == [], output[-20000:]
    # Every operation of the document was tested, none left out.
    operations = sum(1 for item in committed["paths"].values() for method in item
                     if method in {"get", "post", "put", "patch", "delete"})
    assert operations == 19 and result["operations"]["tested"] == operations
    # The valid commands were recorded (the outcome frame's schema was checked, and the
    # feedback pages Schemathesis read had envelopes in them), not only refused.
    assert await client.workspace(tenant, "prod").feedback(), "no command was recorded"
    # Valid queue definitions were installed, not only refused.
    installed = await asyncio.to_thread(QueueBook(client.runtime).queues, tenant, "prod",
                                        archived=True)
    assert installed, "no queue was installed"

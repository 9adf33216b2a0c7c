"""The REST surface's committed OpenAPI document, without a broker."""

from __future__ import annotations

import json
from pathlib import Path

from streams.surfaces.http.app import openapi_document

DOC = Path(__file__).resolve().parents[2] / "docs" / "openapi.json"


def test_the_committed_openapi_document_is_the_served_one() -> None:
    served = json.loads(json.dumps(openapi_document(), sort_keys=True))
    assert json.loads(DOC.read_text()) == served, (
        "docs/openapi.json differs from the app's OpenAPI document: regenerate it with "
        "`python -m streams serve --print-openapi > docs/openapi.json`")


def test_the_document_names_every_route_and_the_command_frame() -> None:
    document = openapi_document()
    assert set(document["paths"]) == {
        "/v1/workspaces/{workspace_id}/commands", "/v1/workspaces/{workspace_id}/runs",
        "/v1/workspaces/{workspace_id}/runs/{run_id}",
        "/v1/workspaces/{workspace_id}/feedback",
        "/v1/workspaces/{workspace_id}/feedback-types",
        "/v1/workspaces/{workspace_id}/me"}
    post = document["paths"]["/v1/workspaces/{workspace_id}/commands"]["post"]
    assert post["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/CommandFrame"}
    assert {"401", "403", "404", "409", "413", "422", "503"} <= set(post["responses"])
    schemas = document["components"]["schemas"]
    assert {"CommandFrame", "GiveFeedback", "RunTarget", "OutcomeFrame", "ErrorFrame"} <= set(
        schemas)

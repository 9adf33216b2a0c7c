"""Run by tests/integration/test_generated_client.py with the tool venv's Python, beside the
client openapi-python-client generated from docs/openapi.json (imported unmodified): gives
feedback on each run, reads the runs and pages through the feedback by cursor, and prints
what it saw as one JSON line.

    python generated_client_driver.py <base url> <token> <workspace id> <run id>...
"""

from __future__ import annotations

import json
import sys

from feedback_streams_client import AuthenticatedClient
from feedback_streams_client.api.default import command, feedback, runs
from feedback_streams_client.models import (
    CommandFrame,
    FeedbackPage,
    GiveFeedbackTriageQuality,
    OutcomeFrame,
    RunsPage,
    RunTarget,
    TriageQuality,
    TriageQualitySeverity,
)


def main() -> None:
    url, token, workspace_id, *run_ids = sys.argv[1:]
    client = AuthenticatedClient(base_url=url, token=token, raise_on_unexpected_status=True)
    recorded = []
    for n, run_id in enumerate(run_ids):
        frame = CommandFrame(command_id=f"gen_{n}", command=GiveFeedbackTriageQuality(
            feedback_type="triage_quality", target=RunTarget(kind="run", run_id=run_id),
            value=TriageQuality(correct=n % 2 == 0, severity=TriageQualitySeverity.HIGH)))
        answer = command.sync(workspace_id=workspace_id, client=client, body=frame)
        assert isinstance(answer, OutcomeFrame), answer
        recorded.append(answer.outcome.id)
    seen_runs = []
    cursor = None
    while True:
        page = runs.sync(workspace_id=workspace_id, client=client, limit=2,
                         **({"cursor": cursor} if cursor else {}))
        assert isinstance(page, RunsPage), page
        seen_runs += [run.id for run in page.runs]
        if not page.next_cursor:
            break
        cursor = page.next_cursor
    pages = []
    cursor = None
    while True:
        given = feedback.sync(workspace_id=workspace_id, client=client, limit=2,
                              feedback_type="triage_quality",
                              **({"cursor": cursor} if cursor else {}))
        assert isinstance(given, FeedbackPage), given
        pages.append([envelope.event_id for envelope in given.feedback])
        if not given.next_cursor:
            break
        cursor = given.next_cursor
    print(json.dumps({"recorded": recorded, "runs": seen_runs, "feedback_pages": pages}))


if __name__ == "__main__":
    main()

"""An application process for the telemetry test (`python -m tests.integration.telemetry_app
TENANT`): `configure_telemetry` for that tenant with Langfuse traces, one run appended inside a
span, then judged; prints {"trace_id", "feedback_id", "langfuse"} as one JSON line.

A process of its own because a tracer provider is installed once per process."""

from __future__ import annotations

import asyncio
import json
import sys

from opentelemetry import trace

from streams import (
    AppEvent,
    RunStarted,
    RunTarget,
    StreamsClient,
    UserActor,
    configure_telemetry,
)
from streams.examples.ops import TriageQuality


async def main(tenant: str) -> None:
    telemetry = configure_telemetry("triage-app", tenant=tenant, langfuse="traces")
    client = StreamsClient.from_env()
    try:
        ws = client.workspace(tenant, "prod", actor=UserActor(id="ada"))
        with trace.get_tracer("triage-app").start_as_current_span("triage") as span:
            spike = await ws.append(AppEvent(name="ops:error_spike"))
            await ws.append(RunStarted(run_id="run_1", rule="ops:error-spike", action="triage",
                                       firing_id="fir_1"),
                            correlation_id=spike.id, causation_id=spike.id)
            trace_id = format(span.get_span_context().trace_id, "032x")
        recorded = await ws.give_feedback(
            TriageQuality(correct=True, severity="low", note=tenant), on=RunTarget(run_id="run_1"))
    finally:
        client.close()
        telemetry.shutdown()
    print(json.dumps({"trace_id": trace_id, "feedback_id": recorded.id,
                      "langfuse": telemetry.langfuse is not None}))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))

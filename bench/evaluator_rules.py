"""The rules module of bench.evaluator_runs: `grade` judges a `b:answer`'s text with a
function evaluator that waits BENCH_JUDGE_MS milliseconds (a model call's latency; 0 by
default) and gives the verdict on the run; `noop` does nothing (the run machinery alone)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from typing import Any

from streams.core.app_events import app_event_type
from streams.core.evaluation import EvaluatorAction
from streams.core.evaluators import FunctionEvaluator
from streams.core.runs import Reaction
from streams.core.targets import RunTarget
from streams.examples.ops import TriageQuality

APP_EVENT_TYPES = [app_event_type("b:answer")]
JUDGE_SECONDS = float(os.environ.get("BENCH_JUDGE_MS", "0")) / 1000


async def noop(reaction: Reaction) -> Mapping[str, Any]:
    return {}


async def _text(reaction: Reaction) -> dict[str, str]:
    return {"text": str(reaction.events[-1].data["text"])}


async def _own_run(reaction: Reaction) -> RunTarget:
    return RunTarget(run_id=reaction.run.run_id)


async def _judged(judged: dict[str, str]) -> TriageQuality:
    if JUDGE_SECONDS:
        await asyncio.sleep(JUDGE_SECONDS)
    return TriageQuality(correct=judged["text"].startswith("right"), severity="low")


grade = EvaluatorAction(FunctionEvaluator(_judged, verdict_type=TriageQuality, name="bench-judge",
                                          version="1"),
                        input=_text, target=_own_run, name="grade")

ACTIONS = {"noop": noop, "grade": grade}

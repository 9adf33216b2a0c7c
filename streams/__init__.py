"""feedback-streams: typed judgements of AI workflows on Kafka, mirrored as scores.

The public API; everything else is importable from its module but may change. Read it in
this order (the names below are grouped the same way):

1. Declaring feedback: `Feedback` subclasses are the types people and evaluators give, on a
   `RunTarget`, `FiringTarget` or `ChainTarget`, by a `UserActor`, `AgentActor`,
   `EvaluatorActor` or `SystemActor`.
2. Giving and reading it: `StreamsClient.from_env()` opens a `Workspace`; `give_feedback`
   returns `Recorded`; `runs` gives `RunRecord`s; `read` the log's `Envelope`s.
3. Events on the log: `AppEvent` (declare your own with `app_event_type`), the firings and
   runs the rules write.
4. Rules: `Rule(name=..., when=on(...), then=run(...))`, `F` for filters; a worker runs them.
5. Evaluators: `FunctionEvaluator` and friends, run by a rule's `EvaluatorAction`.
6. Scores and sinks: each feedback becomes `Score`s (`score_configs`); `FeedbackMirror` carries
   one workspace's scores to a sink in process, `streams sink` every tenant's;
   `configure_telemetry` sends an application's traces to its tenant's Langfuse project.
7. Errors: every error is a `StreamsError` whose message says what to fix.

Names load on first use, so `from streams import Feedback` costs only the core: Kafka, Faust,
HTTP and OpenTelemetry load when a runtime object (StreamsClient, a worker, a sink) is first
used. How the code is laid out: docs/design.md.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from streams.core.actors import AgentActor, EvaluatorActor, SystemActor, UserActor
    from streams.core.app_events import AppEventType, app_event_type
    from streams.core.errors import (
        ConfigError,
        KafkaUnavailable,
        NotFound,
        SchemaError,
        ScoreConfigError,
        SinkError,
        StreamsError,
        ValidationFailed,
    )
    from streams.core.evaluation import EvaluatorAction, chain_events, run_record
    from streams.core.evaluators import Evaluator, Fallback, FunctionEvaluator, HandOff, Verdict
    from streams.core.events import (
        AppEvent,
        Envelope,
        FeedbackGiven,
        RuleFired,
        RunDeadLettered,
        RunFailed,
        RunRetried,
        RunStarted,
        RunSucceeded,
        Seq,
        TraceContext,
    )
    from streams.core.feedback import Feedback, FeedbackRegistry, registry
    from streams.core.rules import F, RetryPolicy, Rule, RuleEngine, on, run
    from streams.core.runs import Reaction, RunRecord
    from streams.core.scores import Score, ScoreConfig, ScoreConfigs, score_configs, scores_of
    from streams.core.sinks.configs import sync_score_configs
    from streams.core.targets import ChainTarget, FiringTarget, RunTarget
    from streams.runtime.client.telemetry import Telemetry, configure_telemetry
    from streams.runtime.client.workspace import Recorded, StreamsClient, Workspace
    from streams.runtime.root import Runtime
    from streams.runtime.sink.mirror import FeedbackMirror
    from streams.settings import Settings

_HOMES: dict[str, str] = {
    # -- Declaring feedback: the types people and evaluators give, and what they target
    "Feedback": "streams.core.feedback",
    "FeedbackRegistry": "streams.core.feedback",
    "registry": "streams.core.feedback",
    "RunTarget": "streams.core.targets",
    "FiringTarget": "streams.core.targets",
    "ChainTarget": "streams.core.targets",
    "UserActor": "streams.core.actors",
    "AgentActor": "streams.core.actors",
    "EvaluatorActor": "streams.core.actors",
    "SystemActor": "streams.core.actors",
    # -- Giving and reading feedback: the handle on a workspace's log
    "StreamsClient": "streams.runtime.client.workspace",
    "Workspace": "streams.runtime.client.workspace",
    "Recorded": "streams.runtime.client.workspace",
    "RunRecord": "streams.core.runs",
    "Envelope": "streams.core.events",
    "Seq": "streams.core.events",
    "TraceContext": "streams.core.events",
    "Settings": "streams.settings",
    "Runtime": "streams.runtime.root",
    # -- Events on the log
    "AppEvent": "streams.core.events",
    "AppEventType": "streams.core.app_events",
    "app_event_type": "streams.core.app_events",
    "FeedbackGiven": "streams.core.events",
    "RuleFired": "streams.core.events",
    "RunStarted": "streams.core.events",
    "RunSucceeded": "streams.core.events",
    "RunFailed": "streams.core.events",
    "RunRetried": "streams.core.events",
    "RunDeadLettered": "streams.core.events",
    # -- Rules and their actions (a worker runs them with --rules)
    "Rule": "streams.core.rules",
    "RuleEngine": "streams.core.rules",
    "F": "streams.core.rules",
    "on": "streams.core.rules",
    "run": "streams.core.rules",
    "RetryPolicy": "streams.core.rules",
    "Reaction": "streams.core.runs",
    # -- Evaluators (judges) and what they read
    "Evaluator": "streams.core.evaluators",
    "FunctionEvaluator": "streams.core.evaluators",
    "Fallback": "streams.core.evaluators",
    "HandOff": "streams.core.evaluators",
    "Verdict": "streams.core.evaluators",
    "EvaluatorAction": "streams.core.evaluation",
    "chain_events": "streams.core.evaluation",
    "run_record": "streams.core.evaluation",
    # -- Scores and sinks: feedback mirrored as scores, carried to Langfuse or DuckDB
    "Score": "streams.core.scores",
    "ScoreConfig": "streams.core.scores",
    "ScoreConfigs": "streams.core.scores",
    "score_configs": "streams.core.scores",
    "scores_of": "streams.core.scores",
    "sync_score_configs": "streams.core.sinks.configs",
    "FeedbackMirror": "streams.runtime.sink.mirror",
    "configure_telemetry": "streams.runtime.client.telemetry",
    "Telemetry": "streams.runtime.client.telemetry",
    # -- Errors: one StreamsError base; each says what to fix
    "StreamsError": "streams.core.errors",
    "ConfigError": "streams.core.errors",
    "KafkaUnavailable": "streams.core.errors",
    "NotFound": "streams.core.errors",
    "SchemaError": "streams.core.errors",
    "ScoreConfigError": "streams.core.errors",
    "SinkError": "streams.core.errors",
    "ValidationFailed": "streams.core.errors",
}

__all__ = [
    "AgentActor",
    "AppEvent",
    "AppEventType",
    "ChainTarget",
    "ConfigError",
    "Envelope",
    "Evaluator",
    "EvaluatorAction",
    "EvaluatorActor",
    "F",
    "Fallback",
    "Feedback",
    "FeedbackGiven",
    "FeedbackMirror",
    "FeedbackRegistry",
    "FiringTarget",
    "FunctionEvaluator",
    "HandOff",
    "KafkaUnavailable",
    "NotFound",
    "Reaction",
    "Recorded",
    "RetryPolicy",
    "Rule",
    "RuleEngine",
    "RuleFired",
    "RunDeadLettered",
    "RunFailed",
    "RunRecord",
    "RunRetried",
    "RunStarted",
    "RunSucceeded",
    "RunTarget",
    "Runtime",
    "SchemaError",
    "Score",
    "ScoreConfig",
    "ScoreConfigError",
    "ScoreConfigs",
    "Seq",
    "Settings",
    "SinkError",
    "StreamsClient",
    "StreamsError",
    "SystemActor",
    "Telemetry",
    "TraceContext",
    "UserActor",
    "ValidationFailed",
    "Verdict",
    "Workspace",
    "app_event_type",
    "chain_events",
    "configure_telemetry",
    "on",
    "registry",
    "run",
    "run_record",
    "score_configs",
    "scores_of",
    "sync_score_configs",
]


def __getattr__(name: str) -> Any:
    """Load a public name from its home module on first use (PEP 562)."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'streams' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))

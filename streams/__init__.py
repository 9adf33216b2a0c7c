"""feedback-streams: typed feedback on Kafka, mirrored as scores.

The public API; everything else is importable from its module but may change. Names load on
first use, so `from streams import Feedback` costs only the core: Kafka, Faust, HTTP and
OpenTelemetry load when a runtime object (StreamsClient, a worker, a sink) is first used.
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
    from streams.runtime.client.workspace import Recorded, StreamsClient, Workspace
    from streams.runtime.root import Runtime
    from streams.runtime.sink.mirror import FeedbackMirror
    from streams.settings import Settings

_HOMES: dict[str, str] = {
    "AgentActor": "streams.core.actors",
    "AppEvent": "streams.core.events",
    "AppEventType": "streams.core.app_events",
    "ChainTarget": "streams.core.targets",
    "ConfigError": "streams.core.errors",
    "Envelope": "streams.core.events",
    "Evaluator": "streams.core.evaluators",
    "EvaluatorAction": "streams.core.evaluation",
    "EvaluatorActor": "streams.core.actors",
    "F": "streams.core.rules",
    "Fallback": "streams.core.evaluators",
    "Feedback": "streams.core.feedback",
    "FeedbackGiven": "streams.core.events",
    "FeedbackMirror": "streams.runtime.sink.mirror",
    "FeedbackRegistry": "streams.core.feedback",
    "FiringTarget": "streams.core.targets",
    "FunctionEvaluator": "streams.core.evaluators",
    "HandOff": "streams.core.evaluators",
    "KafkaUnavailable": "streams.core.errors",
    "NotFound": "streams.core.errors",
    "Reaction": "streams.core.runs",
    "Recorded": "streams.runtime.client.workspace",
    "RetryPolicy": "streams.core.rules",
    "Rule": "streams.core.rules",
    "RuleEngine": "streams.core.rules",
    "RuleFired": "streams.core.events",
    "RunDeadLettered": "streams.core.events",
    "RunFailed": "streams.core.events",
    "RunRecord": "streams.core.runs",
    "RunRetried": "streams.core.events",
    "RunStarted": "streams.core.events",
    "RunSucceeded": "streams.core.events",
    "RunTarget": "streams.core.targets",
    "Runtime": "streams.runtime.root",
    "SchemaError": "streams.core.errors",
    "Score": "streams.core.scores",
    "ScoreConfig": "streams.core.scores",
    "ScoreConfigError": "streams.core.errors",
    "ScoreConfigs": "streams.core.scores",
    "Seq": "streams.core.events",
    "Settings": "streams.settings",
    "SinkError": "streams.core.errors",
    "StreamsClient": "streams.runtime.client.workspace",
    "StreamsError": "streams.core.errors",
    "SystemActor": "streams.core.actors",
    "TraceContext": "streams.core.events",
    "UserActor": "streams.core.actors",
    "ValidationFailed": "streams.core.errors",
    "Verdict": "streams.core.evaluators",
    "Workspace": "streams.runtime.client.workspace",
    "app_event_type": "streams.core.app_events",
    "chain_events": "streams.core.evaluation",
    "on": "streams.core.rules",
    "registry": "streams.core.feedback",
    "run": "streams.core.rules",
    "run_record": "streams.core.evaluation",
    "score_configs": "streams.core.scores",
    "scores_of": "streams.core.scores",
    "sync_score_configs": "streams.core.sinks.configs",
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
    "TraceContext",
    "UserActor",
    "ValidationFailed",
    "Verdict",
    "Workspace",
    "app_event_type",
    "chain_events",
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

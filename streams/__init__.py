"""feedback-streams: typed feedback on Kafka, mirrored as scores.

The public API; everything else is importable from its module but may change.
"""

from streams.actors import AgentActor, EvaluatorActor, SystemActor, UserActor
from streams.errors import (
    KafkaUnavailable,
    NotFound,
    SchemaError,
    ScoreConfigError,
    SinkError,
    StreamsError,
    ValidationFailed,
)
from streams.evaluation import EvaluatorAction, chain_events, run_record
from streams.evaluators import Evaluator, Fallback, FunctionEvaluator, HandOff, Verdict
from streams.events import (
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
from streams.feedback import Feedback, FeedbackRegistry, registry
from streams.rules import F, RetryPolicy, Rule, RuleEngine, on, run
from streams.runs import Reaction
from streams.scores import Score, ScoreConfig, ScoreConfigs, score_configs, scores_of
from streams.settings import Settings
from streams.targets import ChainTarget, FiringTarget, RunTarget
from streams.workspace import Recorded, StreamsClient, Workspace

__all__ = [
    "AgentActor",
    "AppEvent",
    "ChainTarget",
    "Envelope",
    "Evaluator",
    "EvaluatorAction",
    "EvaluatorActor",
    "F",
    "Fallback",
    "Feedback",
    "FeedbackGiven",
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
    "RunRetried",
    "RunStarted",
    "RunSucceeded",
    "RunTarget",
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
    "chain_events",
    "on",
    "registry",
    "run",
    "run_record",
    "score_configs",
    "scores_of",
]

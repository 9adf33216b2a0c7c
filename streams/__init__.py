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
from streams.scores import Score, ScoreConfig, ScoreConfigs, score_configs, scores_of
from streams.settings import Settings
from streams.targets import ChainTarget, FiringTarget, RunTarget
from streams.workspace import Recorded, StreamsClient, Workspace

__all__ = [
    "AgentActor",
    "AppEvent",
    "ChainTarget",
    "Envelope",
    "EvaluatorActor",
    "Feedback",
    "FeedbackGiven",
    "FeedbackRegistry",
    "FiringTarget",
    "KafkaUnavailable",
    "NotFound",
    "Recorded",
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
    "Workspace",
    "registry",
    "score_configs",
    "scores_of",
]

"""Score sinks and score-config stores: where scores go after the scores topic.

`ScoreSink` and `ScoreConfigStore` are small async protocols; `memory` has in-memory
implementations, `contracts` the suites any implementation's tests can run, `langfuse` the
Langfuse adapters, and `runner` runs a sink as a consumer group on the tenants' scores topics.
"""

from streams.core.sinks.base import (
    Rejected,
    ScoreConfigStore,
    ScoreSink,
    flush_sink,
    rejected_of,
)
from streams.core.sinks.configs import check_config_names, sync_score_configs

__all__ = ["Rejected", "ScoreConfigStore", "ScoreSink", "check_config_names", "flush_sink",
           "rejected_of", "sync_score_configs"]

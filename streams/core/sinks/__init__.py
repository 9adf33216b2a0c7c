"""Score sinks and score-config stores: where scores go after the scores topic.

`ScoreSink` and `ScoreConfigStore` are small async protocols (`OffsetStoringSink`, a sink
that keeps its consumer offsets in the same transaction as its rows); `memory` has in-memory
implementations, `contracts` the suites any implementation's tests can run, `langfuse` the
Langfuse adapters, and `runner` runs a sink as a consumer group on the tenants' scores topics.
"""

from streams.core.sinks.base import (
    OffsetStoringSink,
    Partition,
    Rejected,
    ScoreConfigStore,
    ScoreSink,
    flush_sink,
    rejected_of,
    stores_offsets,
)
from streams.core.sinks.configs import check_config_names, sync_score_configs

__all__ = ["OffsetStoringSink", "Partition", "Rejected", "ScoreConfigStore", "ScoreSink",
           "check_config_names", "flush_sink", "rejected_of", "stores_offsets",
           "sync_score_configs"]

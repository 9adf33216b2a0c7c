"""The rules matcher the reactor agent and the decider use: the pure one of
`streams.core.matching`, shared with the in-memory replay (`streams.core.replay`), and
re-exported here where the runtime has always found it."""

from __future__ import annotations

from streams.core.matching import Decision, Forward, Matcher, ReactorStats, is_stateful

__all__ = ["Decision", "Forward", "Matcher", "ReactorStats", "is_stateful"]

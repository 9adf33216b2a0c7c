"""Giving score configs to a store: every registered feedback type's, created once."""

from __future__ import annotations

import re
from collections.abc import Iterable

from streams.core.errors import ScoreConfigError
from streams.core.feedback import Feedback, FeedbackRegistry, registry
from streams.core.scores import score_configs
from streams.core.sinks.base import ScoreConfigStore

# Langfuse's rule for config names (and so for the scores that use them).
MAX_NAME = 35
NAME_PATTERN = re.compile(r"^[\w .()-]+$")


def check_config_names(types: Iterable[type[Feedback]]) -> None:
    """Raise ScoreConfigError for the first `{type}.{field}` name Langfuse would refuse."""
    for cls in types:
        for config in score_configs(cls):
            too_long = len(config.name) > MAX_NAME
            if too_long or not NAME_PATTERN.match(config.name):
                why = (f"is {len(config.name)} characters, more than Langfuse's {MAX_NAME}"
                       if too_long else "has characters Langfuse does not allow")
                raise ScoreConfigError(
                    f"score name {config.name!r} of feedback type {cls.feedback_name!r}, "
                    f"field {config.field!r}, {why}; give the type a shorter name= "
                    f"(class {cls.__qualname__}(Feedback, name=..., ...)) or rename the field")


async def sync_score_configs(
    store: ScoreConfigStore,
    types: Iterable[type[Feedback]] | None = None,
    *,
    registry_: FeedbackRegistry | None = None,
) -> list[str]:
    """Create the configs the store lacks for every registered type (or `types`).

    Existing configs are left as they are; returns the names created. Names are checked
    before anything is sent. Langfuse does not enforce unique names, so this lists first.
    """
    chosen = list(types) if types is not None else list(registry_ or registry)
    check_config_names(chosen)
    existing = {c.name for c in await store.list()}
    created: list[str] = []
    for cls in chosen:
        for config in score_configs(cls):
            if config.name in existing:
                continue
            await store.create(config)
            existing.add(config.name)
            created.append(config.name)
    return created

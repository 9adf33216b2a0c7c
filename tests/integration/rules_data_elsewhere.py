"""An action registry with an action the rules-as-data test's worker does not load: a rule
installed against it is live, but that worker cannot run its runs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from streams.core.runs import Reaction
from tests.integration.rules_data_fixture import APP_EVENT_TYPES

__all__ = ["ACTIONS", "APP_EVENT_TYPES"]


async def elsewhere(reaction: Reaction) -> Mapping[str, Any]:
    return {}


ACTIONS = {"elsewhere": elsewhere}

"""The proposal-outcome rule with its action wrapped for fault tests (`--rules` of a worker;
the mode comes from the worker's environment, PROPOSAL_FIXTURE_MODE):

- `fail-once`: the first attempt gives its feedback, then fails (a retried attempt follows);
- `stall`: an attempt that scored never returns (the test SIGKILLs the worker between the
  feedback's delivery and the batch's commit).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from typing import Any

from streams.core.proposals.rule import (
    PROPOSAL_OUTCOME_ACTION,
    proposal_outcome,
    score_proposal_outcome,
)
from streams.core.runs import Reaction

MODE = os.environ.get("PROPOSAL_FIXTURE_MODE", "")


async def wrapped(reaction: Reaction) -> Mapping[str, Any]:
    output = await score_proposal_outcome(reaction)
    if output["scored"] and MODE == "fail-once" and reaction.attempt == 1:
        raise RuntimeError("crashed after giving the feedback")
    if output["scored"] and MODE == "stall":
        await asyncio.sleep(3600)
    return output


RULES = [proposal_outcome]
ACTIONS = {PROPOSAL_OUTCOME_ACTION: wrapped}

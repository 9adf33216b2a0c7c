"""A feedback type as first deployed: latency up to 1,000 ms (the mirror dead-letters more)."""

from typing import Annotated

from pydantic import Field

from streams.core.feedback import Feedback


class Latency(Feedback, name="redrive_latency", targets={"run"}):
    """How long the run took, as someone measured it."""

    ms: Annotated[int, Field(ge=0, le=1000)]

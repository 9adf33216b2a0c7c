"""The same feedback type, fixed: latency up to 100,000 ms (the cause of its dead letters)."""

from typing import Annotated

from pydantic import Field

from streams.core.feedback import Feedback


class Latency(Feedback, name="redrive_latency", targets={"run"}):
    """How long the run took, as someone measured it."""

    ms: Annotated[int, Field(ge=0, le=100_000)]

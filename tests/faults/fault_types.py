"""Feedback types of the fault and fuzz tests, loaded by their workers with
`--types streams.examples.ops,tests.faults.fault_types`: every field kind, with edge bounds."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from streams.core.feedback import LONG_MAX, LONG_MIN, Feedback

WORKER_TYPES = "streams.examples.ops,tests.faults.fault_types"


class Edges(Feedback, name="fault_edges", targets={"run", "chain"}):
    """A field of every scorable kind; bounds at Avro's limits and an exclusive bound."""

    flag: bool
    level: Literal["low", "mid", "high"]
    big: Annotated[int, Field(ge=LONG_MIN, le=LONG_MAX)]
    small: Annotated[int, Field(ge=-3, le=3)]
    ratio: Annotated[float, Field(gt=0.0, le=1.0)]
    anything: float
    note: str | None = None

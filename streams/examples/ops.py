"""The ops example of the docs: triage runs of an error-spike rule, judged by people and
evaluators. Its feedback types, and the app event types its rules watch and its actions emit."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from streams.core.app_events import AppEventType
from streams.core.feedback import Feedback


class TriageQuality(Feedback, name="triage_quality", targets={"run"}):
    """Was the triage of an error spike right, and how severe was the incident really?"""

    correct: bool
    severity: Literal["low", "high", "critical"]
    note: str | None = None


class ShouldHaveFired(Feedback, targets={"firing"}):
    """Should this rule have fired? Registered as `should_have_fired`."""

    fired_rightly: bool


class Resolution(Feedback, name="resolution", targets={"chain"}):
    """Did the chain end with the incident resolved, and how long did mitigation take?"""

    resolved: bool
    minutes_to_mitigate: Annotated[int, Field(ge=0, le=1440)] | None = None


class ErrorSpike(AppEventType, name="ops:error_spike"):
    """A service reported a burst of errors; three for one service within minutes is a spike."""

    service: str
    errors: int = 1


class IncidentOpened(AppEventType, name="oncall:incident.opened"):
    """A triage opened an incident for a service."""

    service: str
    errors: int


class Escalated(AppEventType, name="oncall:escalated"):
    """Someone said a triage was wrong, and a human was paged; `because` is that feedback."""

    because: str | None = None

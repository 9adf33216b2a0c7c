"""Evaluators: typed judges whose verdicts are feedback, given by an EvaluatorActor.

An evaluator has a ``name``, a ``version`` and a ``verdict_type`` (a concrete Feedback
subclass), and one coroutine, ``evaluate(input) -> Verdict``. A Verdict holds the feedback value
with the evaluator's name and version (its ``actor``, so each version is its own participant),
an optional confidence in [0, 1], the latency and a small string-valued trace (model, tokens,
which member of a Fallback answered).

An evaluator that declines to judge raises ``HandOff`` (optionally with a reason): nothing is
recorded and a person, or the next evaluator of a ``Fallback``, takes over. Any other exception
is a failure of the evaluator and propagates (a rule's run fails and is retried like any other).

    def opened_an_incident(judged: TriageInput) -> TriageQuality:
        if judged.errors < 3:
            raise HandOff("not enough to go on")
        return TriageQuality(correct=judged.opened_incident, severity="high")

    judge = FunctionEvaluator(opened_an_incident, verdict_type=TriageQuality,
                              name="opened-incident", version="1")
    verdict = await judge.evaluate(TriageInput(...))
    verdict.actor.participant  # "evaluator:opened-incident@1"

This module is pure domain code: it imports neither Kafka nor Faust.
"""

from __future__ import annotations

import inspect
import math
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar, cast, overload, runtime_checkable

from streams.core.actors import EvaluatorActor
from streams.core.feedback import Feedback

__all__ = [
    "Evaluator",
    "EvaluatorBase",
    "Fallback",
    "FunctionEvaluator",
    "HandOff",
    "Verdict",
    "check_verdict",
]

In = TypeVar("In", contravariant=True)
Out = TypeVar("Out", bound=Feedback, covariant=True)
_In = TypeVar("_In")
_Out = TypeVar("_Out", bound=Feedback)


class HandOff(Exception):
    """Raised by an evaluator that declines to judge; a person or a fallback takes over.

    ``reason`` (optional) says why, for logs and run outputs.
    """

    def __init__(self, reason: str | None = None) -> None:
        super().__init__(*(() if reason is None else (reason,)))
        self.reason = reason

    def __str__(self) -> str:
        return self.reason or "handed off"


def _check_identity(name: object, version: object) -> EvaluatorActor:
    if not isinstance(name, str) or not name:
        raise ValueError(f"an evaluator needs a non-empty name, got {name!r}")
    if not isinstance(version, str) or not version:
        raise ValueError(f"an evaluator needs a non-empty version, got {version!r}")
    if "@" in version:
        raise ValueError(f"an evaluator version may not contain '@', got {version!r}")
    return EvaluatorActor(name=name, version=version)


def _check_verdict_type(verdict_type: object) -> None:
    if not (isinstance(verdict_type, type) and issubclass(verdict_type, Feedback)):
        raise TypeError(f"verdict_type must be a Feedback subclass, got {verdict_type!r}")
    if verdict_type.feedback_abstract:
        raise TypeError(f"verdict_type {verdict_type.__qualname__} is abstract")


@dataclass(frozen=True, slots=True)
class Verdict(Generic[Out]):
    """One evaluator's judgement: the feedback value and how it came about.

    ``value`` is a concrete Feedback instance; ``confidence`` is None or a finite number in
    [0, 1] (uncalibrated unless the evaluator says otherwise; treat it ordinally);
    ``latency_ms`` >= 0 is the wall time of ``evaluate``; ``trace`` holds string details
    (e.g. ``model``, ``prompt_tokens``, ``evaluator`` for the member of a Fallback that
    answered). Construction checks all of this and raises TypeError / ValueError.
    """

    value: Out
    evaluator: str
    version: str
    confidence: float | None = None
    latency_ms: float = 0.0
    trace: dict[str, str] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.value, Feedback) or type(self.value).feedback_abstract:
            raise TypeError(
                f"a verdict's value must be a concrete Feedback instance, got {self.value!r}"
            )
        _check_identity(self.evaluator, self.version)
        if self.confidence is not None:
            if isinstance(self.confidence, bool) or not isinstance(self.confidence, int | float):
                raise TypeError(f"confidence must be a number or None, got {self.confidence!r}")
            if not (math.isfinite(self.confidence) and 0.0 <= self.confidence <= 1.0):
                raise ValueError(f"confidence must be within [0, 1], got {self.confidence!r}")
            object.__setattr__(self, "confidence", float(self.confidence))
        if not (math.isfinite(self.latency_ms) and self.latency_ms >= 0):
            raise ValueError(f"latency_ms must be finite and >= 0, got {self.latency_ms!r}")
        if self.trace is not None:
            if not all(isinstance(k, str) and isinstance(v, str) for k, v in self.trace.items()):
                raise TypeError(f"trace must map str to str, got {self.trace!r}")
            object.__setattr__(self, "trace", dict(self.trace))

    @property
    def actor(self) -> EvaluatorActor:
        """The EvaluatorActor the verdict is given by (``evaluator:NAME@VERSION``)."""
        return EvaluatorActor(name=self.evaluator, version=self.version)

    @property
    def feedback_type(self) -> str:
        """The registered name of the value's feedback type."""
        return type(self.value).feedback_name

    def as_output(self) -> dict[str, Any]:
        """A JSON-ready summary, e.g. for the output of the run that produced the verdict."""
        return {
            "feedback_type": self.feedback_type,
            "value": self.value.model_dump(mode="json"),
            "evaluator": self.evaluator,
            "version": self.version,
            "confidence": self.confidence,
            "latency_ms": self.latency_ms,
            "trace": dict(self.trace) if self.trace is not None else None,
        }


def check_verdict(verdict: object, verdict_type: type[Feedback]) -> Verdict[Feedback]:
    """Return ``verdict`` if it is a Verdict whose value is a ``verdict_type``; else TypeError.

    Use it where evaluators come from outside (e.g. a rule action running any Evaluator):
    a verdict of the wrong type must never be recorded as feedback.
    """
    if not isinstance(verdict, Verdict):
        raise TypeError(f"an evaluator must return a Verdict, got {type(verdict).__qualname__}")
    if not isinstance(verdict.value, verdict_type):
        raise TypeError(
            f"verdict of {verdict.evaluator}@{verdict.version} is a "
            f"{type(verdict.value).__qualname__}, not the declared "
            f"{verdict_type.__qualname__}"
        )
    return cast("Verdict[Feedback]", verdict)


@runtime_checkable
class Evaluator(Protocol[In, Out]):
    """What every evaluator offers: identity, the verdict type, and ``evaluate``.

    ``evaluate`` returns a Verdict whose value is an instance of ``verdict_type``, or raises
    HandOff to decline. Any object with these members is an evaluator; ``EvaluatorBase``
    is a convenient base class.
    """

    @property
    def name(self) -> str:
        """The evaluator's name (part of its participant)."""
        ...

    @property
    def version(self) -> str:
        """The evaluator's version; each version is its own participant."""
        ...

    @property
    def verdict_type(self) -> type[Out]:
        """The Feedback subclass of every verdict's value."""
        ...

    async def evaluate(self, input: In, /) -> Verdict[Out]:
        """Judge ``input``: a Verdict, or HandOff to decline."""
        ...


class EvaluatorBase(ABC, Generic[_In, _Out]):
    """A base for evaluators: checks identity and verdict type, builds checked verdicts."""

    def __init__(self, *, name: str, version: str, verdict_type: type[_Out]) -> None:
        """Check that name and version make a participant and verdict_type is concrete."""
        _check_identity(name, version)
        _check_verdict_type(verdict_type)
        self._name = name
        self._version = version
        self._verdict_type = verdict_type

    @property
    def name(self) -> str:
        """The evaluator's name."""
        return self._name

    @property
    def version(self) -> str:
        """The evaluator's version."""
        return self._version

    @property
    def verdict_type(self) -> type[_Out]:
        """The Feedback subclass of every verdict's value."""
        return self._verdict_type

    @property
    def actor(self) -> EvaluatorActor:
        """The EvaluatorActor this evaluator's verdicts are given by."""
        return EvaluatorActor(name=self._name, version=self._version)

    @abstractmethod
    async def evaluate(self, input: _In, /) -> Verdict[_Out]:
        """Judge ``input``: a Verdict, or HandOff to decline."""

    def verdict(
        self,
        value: object,
        *,
        confidence: float | None = None,
        latency_ms: float = 0.0,
        trace: Mapping[str, str] | None = None,
    ) -> Verdict[_Out]:
        """A Verdict of this evaluator; TypeError unless ``value`` is a ``verdict_type``."""
        if not isinstance(value, self._verdict_type):
            raise TypeError(
                f"evaluator {self._name}@{self._version} returned "
                f"{type(value).__qualname__}, not its verdict_type "
                f"{self._verdict_type.__qualname__}"
            )
        return Verdict(
            value=value,
            evaluator=self._name,
            version=self._version,
            confidence=confidence,
            latency_ms=latency_ms,
            trace=dict(trace) if trace is not None else None,
        )

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(name={self._name!r}, version={self._version!r}, "
            f"verdict_type={self._verdict_type.__qualname__})"
        )


def _elapsed_ms(started: float) -> float:
    return max(0.0, (time.perf_counter() - started) * 1000.0)


class FunctionEvaluator(EvaluatorBase[_In, _Out]):
    """An evaluator from a plain function, sync or async.

    The function takes the input and returns either a ``verdict_type`` instance (confidence
    None) or a ``(value, confidence)`` tuple; it may raise HandOff to decline. Anything else it
    returns is a TypeError. A sync function runs inline on the event loop, so keep it quick
    (wrap slow work in an async function using ``asyncio.to_thread``). ``name`` defaults to
    the function's ``__name__``, ``version`` to ``"0"``. ``latency_ms`` is the function's wall
    time.
    """

    @overload
    def __init__(
        self,
        fn: Callable[[_In], Awaitable[_Out | tuple[_Out, float]]],
        *,
        verdict_type: type[_Out],
        name: str | None = None,
        version: str = "0",
    ) -> None: ...

    @overload
    def __init__(
        self,
        fn: Callable[[_In], _Out | tuple[_Out, float]],
        *,
        verdict_type: type[_Out],
        name: str | None = None,
        version: str = "0",
    ) -> None: ...

    def __init__(
        self,
        fn: Callable[[_In], Any],
        *,
        verdict_type: type[_Out],
        name: str | None = None,
        version: str = "0",
    ) -> None:
        """Wrap ``fn``; see the class docstring."""
        if not callable(fn):
            raise TypeError(f"FunctionEvaluator needs a callable, got {fn!r}")
        resolved = name if name is not None else getattr(fn, "__name__", "")
        super().__init__(name=resolved, version=version, verdict_type=verdict_type)
        self._fn = fn

    @property
    def fn(self) -> Callable[[_In], Any]:
        """The wrapped function."""
        return self._fn

    async def evaluate(self, input: _In, /) -> Verdict[_Out]:
        """Call the function and check what it returned."""
        started = time.perf_counter()
        result = self._fn(input)
        if inspect.isawaitable(result):
            result = await result
        latency = _elapsed_ms(started)
        confidence: float | None = None
        if isinstance(result, tuple):
            if len(result) != 2:
                raise TypeError(
                    f"evaluator {self.name}@{self.version} returned a tuple of {len(result)}; "
                    "expected (value, confidence)"
                )
            result, confidence = result
        return self.verdict(result, confidence=confidence, latency_ms=latency)


class Fallback(EvaluatorBase[_In, _Out]):
    """Evaluators tried in order: a member raising HandOff passes the input to the next.

    The first verdict wins. It is given as the Fallback's own verdict (its name and version,
    so one participant), with the answering member's confidence and trace, plus
    ``trace["evaluator"]`` and ``trace["evaluator_version"]`` naming that member and, when
    earlier members declined, ``trace["handed_off"]`` listing them (comma-separated).
    ``latency_ms`` covers every member tried. When every member hands off, the Fallback raises
    HandOff with their reasons. Other exceptions of a member propagate at once.

    ``verdict_type`` defaults to the first member's; every member's verdict type must be it or a
    subclass of it (TypeError otherwise).
    """

    def __init__(
        self,
        first: Evaluator[_In, _Out],
        *rest: Evaluator[_In, _Out],
        name: str,
        version: str = "0",
        verdict_type: type[_Out] | None = None,
    ) -> None:
        """Chain ``first`` and ``rest``; see the class docstring."""
        members = (first, *rest)
        for member in members:
            if not isinstance(member, Evaluator):
                raise TypeError(f"Fallback members must be evaluators, got {member!r}")
        declared = verdict_type if verdict_type is not None else first.verdict_type
        _check_verdict_type(declared)
        for member in members:
            if not issubclass(member.verdict_type, declared):
                raise TypeError(
                    f"Fallback {name!r}: member {member.name}@{member.version} gives "
                    f"{member.verdict_type.__qualname__}, not {declared.__qualname__}"
                )
        super().__init__(name=name, version=version, verdict_type=declared)
        self._members = members

    @property
    def members(self) -> tuple[Evaluator[_In, _Out], ...]:
        """The members, in the order they are tried."""
        return self._members

    async def evaluate(self, input: _In, /) -> Verdict[_Out]:
        """Ask each member in turn until one gives a verdict."""
        started = time.perf_counter()
        declined: list[str] = []
        reasons: list[str] = []
        for member in self._members:
            try:
                answer = await member.evaluate(input)
            except HandOff as exc:
                declined.append(member.name)
                reasons.append(f"{member.name}@{member.version}: {exc}")
                continue
            checked = check_verdict(answer, member.verdict_type)
            trace = dict(checked.trace or {})
            trace["evaluator"] = member.name
            trace["evaluator_version"] = member.version
            if declined:
                trace["handed_off"] = ",".join(declined)
            return self.verdict(
                checked.value,
                confidence=checked.confidence,
                latency_ms=_elapsed_ms(started),
                trace=trace,
            )
        raise HandOff(f"every member of {self.name} handed off ({'; '.join(reasons)})")

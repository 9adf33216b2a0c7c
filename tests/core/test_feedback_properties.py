"""Property-based: generated feedback types and values through validation, Avro and the mirror.

For every generated type (bool, Literal, bounded int/float with edge bounds, str, optional
str) and value, `validate_feedback` either accepts the value, and then the value written as
Avro (the serde of give_feedback) and read by the mirror's step (fastavro, validation, score
mapping) gives exactly the scores of the value, or refuses it with ValidationFailed. An oracle
written here says which values are valid, so a wrongly accepted or wrongly refused value fails.
A refused value that Avro can still carry (written by another producer) must be dead-lettered
by the mirror, never scored.

No broker: the registry is confluent-kafka's in-process double (tests/faults has the broker).
"""

from __future__ import annotations

import io
import itertools
import json
import math
import types
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import fastavro
from confluent_kafka.schema_registry import Schema as RegistrySchema
from confluent_kafka.schema_registry import SchemaRegistryClient
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pydantic import Field

from streams.adapters.avro.codec import envelope_to_record, score_records
from streams.adapters.avro.fast import FastCodec, frame, without_logical_types
from streams.adapters.avro.schemas import feedback_given_schema
from streams.adapters.avro.serde import AvroSerde
from streams.core.actors import UserActor
from streams.core.errors import ValidationFailed
from streams.core.events import Envelope, FeedbackGiven
from streams.core.feedback import LONG_MAX, LONG_MIN, Feedback, FeedbackRegistry, validate_feedback
from streams.core.scores import score_configs
from streams.core.targets import RunTarget
from streams.runtime.client.workspace import value_record
from streams.runtime.worker.mirror import MirrorStep

TOPIC = "fs.acme.events"
_names = itertools.count()
_client = SchemaRegistryClient.new_client({"url": "mock://feedback-properties"})

# -- generated types ------------------------------------------------------------------------


@dataclass(frozen=True)
class FieldSpec:
    kind: str  # bool, literal, int, float, str, ostr
    symbols: tuple[str, ...] = ()
    lo: float | None = None
    hi: float | None = None
    lo_excl: bool = False
    hi_excl: bool = False

    def annotation(self) -> Any:
        if self.kind == "bool":
            return bool
        if self.kind == "literal":
            return Literal[self.symbols]  # type: ignore[valid-type]
        if self.kind in ("int", "float"):
            bounds: dict[str, Any] = {}
            if self.lo is not None:
                bounds["gt" if self.lo_excl else "ge"] = self.lo
            if self.hi is not None:
                bounds["lt" if self.hi_excl else "le"] = self.hi
            base = int if self.kind == "int" else float
            return Annotated[base, Field(**bounds)] if bounds else base
        if self.kind == "str":
            return str
        return str | None

    def accepts(self, value: Any) -> bool:
        """The oracle: does the type accept `value` (of the shapes generated below)?"""
        if self.kind == "ostr" and value is None:
            return True
        if self.kind in ("str", "ostr"):
            return isinstance(value, str) and _utf8(value)
        if self.kind == "bool":
            return isinstance(value, bool)
        if self.kind == "literal":
            return isinstance(value, str) and value in self.symbols
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False
        if self.kind == "int" and (not isinstance(value, int)
                                   or not LONG_MIN <= value <= LONG_MAX):
            return False
        if isinstance(value, float) and not math.isfinite(value):
            return False
        if self.lo is not None and (value <= self.lo if self.lo_excl else value < self.lo):
            return False
        return not (self.hi is not None and (value >= self.hi if self.hi_excl else value > self.hi))


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


_LONG_EDGES = [LONG_MIN, LONG_MIN + 1, -1, 0, 1, LONG_MAX - 1, LONG_MAX]
_FLOAT_EDGES = [-1e308, -1.0, -5e-324, 0.0, 5e-324, 0.5, 1.0, 1e308]
_symbol = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,8}", fullmatch=True)


@st.composite
def field_specs(draw: st.DrawFn) -> FieldSpec:
    kind = draw(st.sampled_from(["bool", "literal", "int", "float", "str", "ostr"]))
    if kind == "literal":
        return FieldSpec(kind, symbols=tuple(draw(st.lists(_symbol, min_size=1, max_size=5,
                                                           unique=True))))
    if kind == "int":
        ends = st.none() | st.sampled_from(_LONG_EDGES) | st.integers(-1000, 1000)
        lo, hi = draw(ends), draw(ends)
        if lo is not None and hi is not None and lo > hi:
            lo, hi = hi, lo
        return FieldSpec(kind, lo=lo, hi=hi)
    if kind == "float":
        ends = st.none() | st.sampled_from(_FLOAT_EDGES) | st.floats(-1e6, 1e6)
        lo, hi = draw(ends), draw(ends)
        if lo is not None and hi is not None and lo >= hi:
            lo, hi = (hi, lo) if lo > hi else (lo, None)
        lo_excl = lo is not None and draw(st.booleans())
        hi_excl = hi is not None and draw(st.booleans())
        if lo_excl and hi_excl and math.nextafter(lo, math.inf) >= hi:
            hi_excl = False  # no double lies strictly between: keep the type satisfiable
        return FieldSpec(kind, lo=lo, hi=hi, lo_excl=lo_excl, hi_excl=hi_excl)
    return FieldSpec(kind)


def make_type(fields: dict[str, FieldSpec], types_: FeedbackRegistry) -> type[Feedback]:
    name = f"prop_{next(_names)}"
    annotations = {k: f.annotation() for k, f in fields.items()}
    defaults = {k: None for k, f in fields.items() if f.kind == "ostr"}

    def body(ns: dict[str, Any]) -> None:
        ns["__annotations__"] = annotations
        ns.update(defaults)

    return types.new_class(name.title().replace("_", ""), (Feedback,),
                           {"name": name, "targets": {"run"}, "registry": types_}, body)


# -- values -------------------------------------------------------------------------------

_surrogate_text = st.builds(lambda a, s, b: a + s + b, st.text(max_size=3),
                            st.characters(categories=["Cs"]), st.text(max_size=3))


def good_value(spec: FieldSpec) -> st.SearchStrategy[Any]:
    if spec.kind == "bool":
        return st.booleans()
    if spec.kind == "literal":
        return st.sampled_from(spec.symbols)
    if spec.kind in ("str", "ostr"):
        text = st.text(max_size=40)  # any unicode but lone surrogates
        return text | st.none() if spec.kind == "ostr" else text
    if spec.kind == "int":
        lo = LONG_MIN if spec.lo is None else int(spec.lo)
        hi = LONG_MAX if spec.hi is None else int(spec.hi)
        edges = [v for v in (lo, lo + 1, hi - 1, hi, 0) if lo <= v <= hi]
        return st.integers(lo, hi) | st.sampled_from(edges)
    return st.floats(spec.lo, spec.hi, exclude_min=spec.lo_excl, exclude_max=spec.hi_excl,
                     allow_nan=False, allow_infinity=False).filter(spec.accepts)


def bad_value(spec: FieldSpec) -> st.SearchStrategy[Any]:
    """Values the type must refuse (unambiguously: no lax coercion could accept them)."""
    wrong = st.sampled_from([[1], {"a": 1}, (2, 3)])
    if spec.kind == "bool":
        return wrong | st.sampled_from([2, -1, "maybe", None, 0.5])
    if spec.kind == "literal":
        return wrong | st.sampled_from([None, 0, "", spec.symbols[0] + "_not"]) | \
            st.text(max_size=5).filter(lambda s: s not in spec.symbols)
    if spec.kind in ("str", "ostr"):
        return wrong | _surrogate_text | st.integers(-5, 5)
    outside: list[Any] = [None, "abc", math.nan, math.inf, -math.inf]
    if spec.kind == "int":
        outside += [LONG_MAX + 1, LONG_MIN - 1, 2**70, 0.5]
    if spec.lo is not None:
        outside += [spec.lo if spec.lo_excl else None, spec.lo - 1, spec.lo - 1e-3 * abs(spec.lo)
                    - 1e-3 if spec.kind == "float" else spec.lo - 1]
    if spec.hi is not None:
        outside += [spec.hi if spec.hi_excl else None, spec.hi + 1]
    return wrong | st.sampled_from([v for v in outside if not spec.accepts(v)])


@st.composite
def typed_values(draw: st.DrawFn) -> tuple[dict[str, FieldSpec], dict[str, Any], bool]:
    """(field specs, a value mapping, whether the oracle says it is valid)."""
    names = draw(st.lists(st.from_regex(r"[a-z][a-z0-9_]{0,10}", fullmatch=True), min_size=1,
                          max_size=5, unique=True))
    fields = {n: draw(field_specs()) for n in names}
    value: dict[str, Any] = {}
    for name, spec in fields.items():
        if draw(st.integers(0, 9)) == 0:  # now and then a bad field, or a missing one
            if draw(st.booleans()) or spec.kind == "ostr":
                value[name] = draw(bad_value(spec))
            continue
        if spec.kind == "ostr" and draw(st.booleans()):
            continue  # optional, left out
        value[name] = draw(good_value(spec))
    if draw(st.integers(0, 19)) == 0:
        value["not_a_field_" + names[0]] = 1
    valid = all(n in value or f.kind == "ostr" for n, f in fields.items()) and \
        all(n in fields and fields[n].accepts(v) for n, v in value.items())
    return fields, value, valid


# -- the properties -----------------------------------------------------------------------


def _envelope(cls: type[Feedback], record: dict[str, Any]) -> Envelope:
    return Envelope.new(
        FeedbackGiven(feedback_type=cls.feedback_name, target=RunTarget(run_id="run_1"),
                      target_trace_id=None, value=record),
        tenant="acme", workspace="prod", actor=UserActor(id="ada"), correlation_id="chain_1")


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(typed_values())
def test_given_values_round_trip_to_their_scores_or_are_refused(
    case: tuple[dict[str, FieldSpec], dict[str, Any], bool],
) -> None:
    fields, value, valid = case
    types_ = FeedbackRegistry()
    cls = make_type(fields, types_)
    try:
        checked = validate_feedback(value, cls.feedback_name, types_)
    except ValidationFailed as refused:
        assert not valid, f"a valid value was refused: {value!r}: {refused}"
        return
    assert valid, f"an invalid value was accepted: {value!r} as {checked!r}"

    record = value_record(checked)
    envelope = _envelope(cls, record)
    data = AvroSerde(_client, types=types_).encode_envelope(envelope, TOPIC)
    step = MirrorStep(FastCodec(_client), prefix="fs", types=types_)
    outputs = step.handle(TOPIC, 0, 7, envelope.event_id.encode(), data, b"feedback_given")
    assert step.stats.dead_letters == 0, [o.headers for o in outputs]
    assert {o.topic for o in outputs} <= {"fs.acme.scores"}
    codec = FastCodec(_client)
    got = [codec.decode(o.value)[1] for o in outputs]
    want = score_records(
        score_configs(cls), record, feedback_event_id=envelope.event_id,
        timestamp=int(envelope.time.timestamp() * 1000), tenant="acme", workspace="prod",
        target_kind="run", target_id="run_1", participant="user:ada", trace_id=None,
        session_id="chain_1", seq="0:7")
    assert got == want
    # Every scorable field that holds a value has its score, with the value given.
    by_name = {r["name"]: r for r in got}
    for name, spec in fields.items():
        held = getattr(checked, name)
        score = by_name.get(f"{cls.feedback_name}.{name}")
        if held is None or held == "":
            assert score is None
        elif spec.kind == "bool":
            assert score is not None and score["numeric_value"] == (1.0 if held else 0.0)
        elif spec.kind in ("int", "float"):
            assert score is not None and score["numeric_value"] == float(held)
        else:
            assert score is not None and score["string_value"] == held


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(typed_values())
@example(({"x": FieldSpec("float")}, {"x": math.nan}, False))
@example(({"x": FieldSpec("float")}, {"x": -math.inf}, False))
@example(({"n": FieldSpec("int", lo=0, hi=10)}, {"n": 11}, False))
def test_what_give_feedback_refuses_the_mirror_dead_letters(
    case: tuple[dict[str, FieldSpec], dict[str, Any], bool],
) -> None:
    """A value written as Avro by another producer, bypassing give_feedback: if validation
    refuses it and Avro can carry it, the mirror dead-letters it with a reason; if validation
    accepts it, the mirror scores it."""
    fields, value, _valid = case
    types_ = FeedbackRegistry()
    cls = make_type(fields, types_)
    schema = feedback_given_schema(cls)
    # Fill what the value lacks with nulls, the way a careless producer would.
    raw = {name: value.get(name) for name in fields}
    envelope = _envelope(cls, {})
    head = envelope_to_record(envelope)
    head["envelope"]["time"] = int(envelope.time.timestamp() * 1000)
    head["value"] = raw
    parsed = fastavro.parse_schema(without_logical_types(json.loads(json.dumps(schema))))
    out = io.BytesIO()
    try:
        fastavro.schemaless_writer(out, parsed, head)
    except (ValueError, TypeError, KeyError, AttributeError, OverflowError):
        return  # Avro cannot carry it: nobody can write it to the topic
    writer_id = _client.register_schema(f"{schema['namespace']}.{schema['name']}",
                                        RegistrySchema(json.dumps(schema), "AVRO"))
    step = MirrorStep(FastCodec(_client), prefix="fs", types=types_)
    outputs = step.handle(TOPIC, 1, 3, b"k", frame(writer_id, out.getvalue()), None)
    # What was written: every declared field, missing ones as null (or what Avro made of
    # them: fastavro writes None as false for a boolean).
    raw = fastavro.schemaless_reader(io.BytesIO(out.getvalue()), parsed, None)["value"]
    valid = all(f.accepts(raw[n]) or (f.kind == "ostr" and raw[n] is None)
                for n, f in fields.items())
    try:
        validate_feedback(raw, cls.feedback_name, types_)
        accepted = True
    except ValidationFailed:
        accepted = False
    assert accepted == valid, raw
    if valid:
        assert step.stats.dead_letters == 0 and step.stats.scores == len(outputs)
    else:
        assert step.stats.scores == 0, f"the mirror scored a refused value: {raw!r}"
        assert step.stats.dead_letters == 1
        [dead] = outputs
        assert dead.topic == "fs.acme.deadletter"
        reason = dict(dead.headers or []).get("reason", b"").decode()
        assert reason.startswith(f"invalid {cls.feedback_name} value") or \
            reason.startswith(f"{cls.feedback_name}."), reason

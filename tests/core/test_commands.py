"""Command frames, error codes, workspace ids and the ledger's fold, without a broker."""

from __future__ import annotations

import hashlib
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streams.core.commands import (
    ERROR_CODES,
    HTTP_STATUS,
    MAX_BODY_BYTES,
    CommandFailed,
    GiveFeedback,
    LedgerEntry,
    check_value,
    command_digest,
    error_frame_of,
    feedback_digest,
    fold_ledger,
    ledger_key,
    parse_frame,
    parse_workspace_id,
    whole_numbers,
    workspace_id,
)
from streams.core.errors import (
    Conflict,
    Forbidden,
    KafkaUnavailable,
    NotFound,
    TooLarge,
    Unauthorized,
    ValidationFailed,
)
from streams.core.feedback import registry
from streams.core.ids import command_event_id
from streams.core.targets import ChainTarget, FiringTarget, RunTarget
from streams.examples.ops import TriageQuality  # noqa: F401  (registers triage_quality)


def frame(**command: object) -> dict[str, object]:
    body: dict[str, object] = {"type": "give_feedback", "feedback_type": "triage_quality",
                               "target": {"kind": "run", "run_id": "run_1"},
                               "value": {"correct": True, "severity": "high"}}
    body.update(command)
    return {"type": "command", "command_id": "fb_1", "command": body}


def failure(body: object) -> CommandFailed:
    with pytest.raises(CommandFailed) as caught:
        parse_frame(body)  # type: ignore[arg-type]
    return caught.value


def test_the_seed_frame_parses() -> None:
    parsed = parse_frame(json.dumps(frame()))
    assert parsed.command_id == "fb_1"
    assert parsed.command.target == RunTarget(run_id="run_1")
    assert parsed.command.value == {"correct": True, "severity": "high"}


def test_a_command_id_is_optional() -> None:
    body = frame()
    del body["command_id"]
    assert parse_frame(body).command_id is None


def test_the_type_fields_default_as_the_published_document_says() -> None:
    # docs/openapi.json gives both `type` fields a default: a body without them is valid by
    # the document, so the server records it (a generated client may leave defaults out).
    body = frame()
    del body["type"]
    del body["command"]["type"]  # type: ignore[attr-defined]
    parsed = parse_frame(json.dumps(body))
    assert parsed.type == "command"
    assert parsed.command.type == "give_feedback"
    assert parsed.command.feedback_type == "triage_quality"


@pytest.mark.parametrize("body, path", [
    (b"{not json", "$"),
    (b"[1, 2]", "$"),
    (json.dumps({"type": "subscribe"}), "type"),
    (json.dumps(frame(type="delete_everything")), "command.type"),
    (json.dumps(frame(target={"kind": "moon", "id": "x"})), "command.target"),
    (json.dumps({**frame(), "command_id": "bad id with spaces"}), "command_id"),
    (json.dumps(frame(extra=1)), "command.extra"),
])
def test_malformed_frames_are_validation_failed_with_a_path(body: str | bytes,
                                                            path: str) -> None:
    failed = failure(body)
    assert failed.code == "validation_failed"
    assert any(p.path.startswith(path) for p in failed.fields), failed.fields


def test_an_error_frame_carries_the_command_id_when_it_can_be_read() -> None:
    failed = failure(json.dumps(frame(type="delete_everything")))
    assert failed.frame().command_id == "fb_1"
    assert failure(b"{not json").frame().command_id is None


def test_an_oversized_body_is_too_large() -> None:
    failed = failure(b" " * (MAX_BODY_BYTES + 1))
    assert failed.code == "too_large"
    assert failed.frame("fb_1").status == 413


def test_values_are_checked_against_the_registered_type_with_field_paths() -> None:
    command = parse_frame(frame(value={"correct": "maybe", "severity": "apocalyptic"})).command
    with pytest.raises(CommandFailed) as caught:
        check_value(command, registry)
    paths = {p.path for p in caught.value.fields}
    assert paths == {"command.value.correct", "command.value.severity"}
    assert caught.value.code == "validation_failed"


def test_a_whole_float_is_an_integer_as_json_schema_says_and_a_fraction_is_not() -> None:
    # Resolution.minutes_to_mitigate is an int: the published schema's "integer" takes 1.0.
    def on_chain(minutes: object) -> GiveFeedback:
        return parse_frame(frame(feedback_type="resolution", target={
            "kind": "chain", "correlation_id": "evt_1"},
            value={"resolved": True, "minutes_to_mitigate": minutes})).command

    assert check_value(on_chain(12.0), registry).feedback_name == "resolution"
    assert whole_numbers({"a": [1.0, 2.5, {"b": -3.0}], "c": "1.0", "d": True}) == \
        {"a": [1, 2.5, {"b": -3}], "c": "1.0", "d": True}
    with pytest.raises(CommandFailed, match="minutes_to_mitigate"):
        check_value(on_chain(12.5), registry)


def test_unknown_feedback_types_and_wrong_target_kinds_are_refused() -> None:
    unknown = parse_frame(frame(feedback_type="vibes")).command
    with pytest.raises(CommandFailed, match="unknown feedback type 'vibes'"):
        check_value(unknown, registry)
    on_chain = parse_frame(frame(target={"kind": "chain", "correlation_id": "evt_1"})).command
    with pytest.raises(CommandFailed, match="cannot be given on a chain") as caught:
        check_value(on_chain, registry)
    assert caught.value.fields[0].path == "command.target.kind"


@pytest.mark.parametrize("error, code, status", [
    (ValidationFailed("x"), "validation_failed", 422),
    (TooLarge("x"), "too_large", 413),
    (NotFound("x"), "not_found", 404),
    (Unauthorized("x"), "unauthorized", 401),
    (Forbidden("x"), "forbidden", 403),
    (Conflict("x"), "conflict", 409),
    (KafkaUnavailable("x"), "unavailable", 503),
    (RuntimeError("boom"), "unavailable", 503),
])
def test_every_error_has_its_code_and_status(error: Exception, code: str, status: int) -> None:
    answer = error_frame_of(error, "fb_1")
    assert (answer.error.code, answer.status, answer.command_id) == (code, status, "fb_1")
    assert answer.model_dump(mode="json")["type"] == "error"


def test_the_codes_are_the_issues() -> None:
    assert set(ERROR_CODES) == {"validation_failed", "not_found", "unauthorized", "forbidden",
                                "conflict", "too_large", "unavailable"}
    assert len(set(HTTP_STATUS.values())) == len(HTTP_STATUS)


def test_workspace_ids() -> None:
    assert parse_workspace_id("acme.prod") == ("acme", "prod")
    assert parse_workspace_id("acme.team.prod") == ("acme", "team.prod")
    assert workspace_id("acme", "team.prod") == "acme.team.prod"
    for bad in ("acme", "Acme.prod", ".prod", "acme.", "acme.-x"):
        with pytest.raises(ValidationFailed, match=r"tenant|workspace"):
            parse_workspace_id(bad)


def test_the_digest_ignores_key_order_and_tells_commands_apart() -> None:
    a = GiveFeedback.model_validate(frame()["command"])
    b = GiveFeedback.model_validate(
        {**frame()["command"], "value": {"severity": "high", "correct": True}})  # type: ignore[dict-item]
    c = GiveFeedback.model_validate(frame(value={"correct": False, "severity": "high"})[
        "command"])
    assert command_digest(a) == command_digest(b) != command_digest(c)


def test_the_digest_is_pinned_so_ledgers_written_by_earlier_versions_still_match() -> None:
    # A ledger outlives deployments: a retry after an upgrade must find the same digest.
    command = GiveFeedback(feedback_type="triage_quality", target=RunTarget(run_id="run_1"),
                           value={"severity": "high", "correct": True})
    text = ('{"feedback_type":"triage_quality","target":{"kind":"run","run_id":"run_1"},'
            '"type":"give_feedback","value":{"correct":true,"severity":"high"}}')
    assert command_digest(command) == hashlib.sha256(text.encode()).hexdigest()


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8)
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                 max_size=3),
    max_leaves=8)
_targets = st.one_of(
    st.builds(RunTarget, run_id=st.text(min_size=1, max_size=10)),
    st.builds(FiringTarget, firing_id=st.text(min_size=1, max_size=10)),
    st.builds(ChainTarget, correlation_id=st.text(min_size=1, max_size=10)))


@given(feedback_type=st.text(min_size=1, max_size=20), target=_targets,
       value=st.dictionaries(st.text(max_size=6), _json_values, max_size=4))
def test_the_digest_of_parts_is_the_digest_of_the_command(
        feedback_type: str, target: RunTarget | FiringTarget | ChainTarget,
        value: dict[str, object]) -> None:
    # give_feedback_many digests each item from its parts; a command id used through the
    # batch and through any single surface must name the same command.
    command = GiveFeedback(feedback_type=feedback_type, target=target, value=value)
    assert feedback_digest(feedback_type, target.model_dump(mode="json"), value) \
        == command_digest(command)


def test_command_event_ids_are_derived_per_actor_workspace_and_id() -> None:
    one = command_event_id("acme", "prod", "user:ada", "fb_1")
    assert one == command_event_id("acme", "prod", "user:ada", "fb_1")
    assert len({one, command_event_id("acme", "prod", "user:bob", "fb_1"),
                command_event_id("acme", "dev", "user:ada", "fb_1"),
                command_event_id("acme", "prod", "user:ada", "fb_2")}) == 4
    assert ledger_key("prod", "user:ada", "fb_1") != ledger_key("prod", "user:ad", "afb_1")


def claim(name: str, supersedes: str | None = None, digest: str = "d") -> LedgerEntry:
    return LedgerEntry(state="claimed", digest=digest, claim=name, supersedes=supersedes)


def fold(*records: LedgerEntry) -> LedgerEntry | None:
    state = None
    for record in records:
        state = fold_ledger(state, record)
    return state


def test_the_first_claim_wins_and_a_recorded_command_stays_recorded() -> None:
    a, b = claim("a"), claim("b")
    assert fold(a, b) == a
    done = a.replace(state="recorded", partition=1, offset=7, event_id="evt_x")
    assert fold(a, b, done, claim("c", supersedes="a")) == done
    assert done.outcome("fb_1").outcome.seq.offset == 7


def test_a_stale_claim_is_taken_over_once() -> None:
    a = claim("a")
    first, second = claim("b", supersedes="a"), claim("c", supersedes="a")
    assert fold(a, first, second) == first


def test_a_released_claim_lets_the_next_claim_win() -> None:
    a, b = claim("a"), claim("b", digest="other")
    released = a.replace(state="released")
    assert fold(a, released) == released
    assert fold(a, released, b) == b
    assert fold(a, b.replace(state="released", claim="b")) == a


def test_ledger_entries_round_trip() -> None:
    entry = claim("a", supersedes="z")
    assert LedgerEntry.decode(entry.encode()) == entry
    assert LedgerEntry.decode(b"not json") is None


def test_ledger_records_keep_their_wire_form() -> None:
    # What earlier versions wrote (and read): compact JSON in field order, defaults left
    # out. Every process of a tenant reads every other's records, so this form is a contract.
    done = LedgerEntry(state="recorded", digest="d", claim="c", owner="o", at_ms=5,
                       partition=0, offset=7, event_id="evt_x")
    wire = (b'{"state":"recorded","digest":"d","claim":"c","owner":"o","at_ms":5,'
            b'"partition":0,"offset":7,"event_id":"evt_x"}')
    assert done.encode() == wire
    assert LedgerEntry.decode(wire) == done
    assert LedgerEntry(state="released", digest="d").encode() == \
        b'{"state":"released","digest":"d"}'


@pytest.mark.parametrize("value", [
    b'{"state":"done","digest":"d"}',  # a state this version does not know
    b'{"state":"claimed"}',  # no digest
    b'{"state":"claimed","digest":"d","at_ms":"5"}',  # a number as text
    b'{"state":"claimed","digest":"d","later":1}',  # a field of a later version
    b'[1,2]',
    b'{"state":"claimed","digest":"\xff"}',  # not UTF-8
])
def test_a_ledger_record_this_version_cannot_read_is_none(value: bytes) -> None:
    assert LedgerEntry.decode(value) is None

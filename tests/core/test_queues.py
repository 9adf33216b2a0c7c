"""Queues as data: the JSON form, its committed schema, and refusals that name the path."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import streams.examples.ops  # noqa: F401  (registers triage_quality, resolution, ...)
from streams.core.errors import ValidationFailed
from streams.core.feedback import registry
from streams.core.queues import (
    QUEUE_SCHEMA,
    Entry,
    InvalidQueue,
    Queue,
    QueueEntry,
    QueueNameTaken,
    check_install,
    entry_key,
    numeric_fields,
    parse_queue,
    queue_from_dict,
    queue_schema_for,
    queue_to_dict,
)

SCHEMA_FILE = Path(__file__).parents[2] / "schemas" / "queue" / "v1.schema.json"


def a_queue(**changes: Any) -> dict[str, Any]:
    """A valid queue's JSON form (the module docstring's example), with `changes`."""
    return {"name": "triage-review", "enters": {"runs_of": "ops:wrong-triage"},
            "feedback_types": ["triage_quality"], "reviewers": 2, "blind": True,
            "sample": 0.25, "lease_seconds": 600, **changes}


def test_the_committed_schema_is_the_codes_schema() -> None:
    from jsonschema import Draft202012Validator

    Draft202012Validator.check_schema(QUEUE_SCHEMA)
    assert json.loads(SCHEMA_FILE.read_text()) == QUEUE_SCHEMA


def test_the_documented_example() -> None:
    queue = queue_from_dict(a_queue())
    assert queue == Queue(name="triage-review", enters=Entry(kind="runs_of",
                                                             rule="ops:wrong-triage"),
                          feedback_types=("triage_quality",), sample=0.25, reviewers=2,
                          blind=True, lease_seconds=600.0)
    assert queue.item_kind == "run"


def test_defaults_one_reviewer_not_blind_everything_sampled_a_quarter_hour_lease() -> None:
    queue = queue_from_dict({"name": "q", "enters": {"chains": {}},
                             "feedback_types": ["resolution"]})
    assert (queue.reviewers, queue.blind, queue.sample, queue.lease_seconds) == \
        (1, False, 1.0, 900.0)
    assert queue.item_kind == "chain"


@st.composite
def queues(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(["runs_of", "firings_of", "chains", "judged_below",
                                 "disagreements", "pairs"]))
    enters: dict[str, Any]
    if kind == "pairs":
        enters = {"pairs": {"evaluator": "judge", "versions": ["2", "3"],
                            "feedback_type": "resolution", "on": "chain"}}
        types = draw(st.sampled_from([["pairwise_preference"],
                                      ["resolution", "pairwise_preference"]]))
    elif kind in ("runs_of", "firings_of"):
        enters = {kind: draw(st.from_regex(r"[a-z0-9][a-z0-9:_.-]{0,20}", fullmatch=True))}
        types = ["triage_quality"] if kind == "runs_of" else ["should_have_fired"]
    elif kind == "chains":
        enters, types = {"chains": {}}, ["resolution"]
    else:
        body: dict[str, Any] = {"evaluator": draw(st.sampled_from(["judge", "judge@2"])),
                                "feedback_type": "resolution", "on": "chain"}
        if kind == "judged_below":
            body.update(field="minutes_to_mitigate",
                        threshold=draw(st.floats(-1e6, 1e6, allow_nan=False)))
        enters, types = {kind: body}, ["resolution"]
    data: dict[str, Any] = {"name": draw(st.from_regex(r"[a-z0-9][a-z0-9-]{0,20}",
                                                       fullmatch=True)),
                            "enters": enters, "feedback_types": types}
    if draw(st.booleans()):
        data["reviewers"] = draw(st.integers(1, 100))
        data["blind"] = draw(st.booleans())
        data["sample"] = draw(st.floats(0.001, 1.0))
        data["lease_seconds"] = draw(st.floats(1.0, 86400.0))
        data["description"] = draw(st.text(max_size=20))
    return data


@given(queues())
def test_a_queue_s_json_form_gives_the_queue_back(data: dict[str, Any]) -> None:
    from jsonschema import Draft202012Validator

    queue = queue_from_dict(data)
    again = queue_to_dict(queue)
    Draft202012Validator(QUEUE_SCHEMA).validate(again)
    assert queue_from_dict(again) == queue
    assert parse_queue(json.dumps(again)) == queue


@pytest.mark.parametrize(("changes", "path", "says"), [
    ({"reviewers": 0}, "$.reviewers", "less than the minimum"),
    ({"sample": 0}, "$.sample", "less than or equal to the minimum"),
    ({"lease_seconds": -1}, "$.lease_seconds", "less than or equal to the minimum"),
    ({"name": "Triage Review"}, "$.name", "does not match"),
    ({"feedback_types": []}, "$.feedback_types", "should be non-empty"),
    ({"enters": {"runs_of": "a", "chains": {}}}, "$.enters", "is not valid under any"),
    ({"enters": {"everything": {}}}, "$.enters", "is not valid under any"),
    ({"assignee": "ada"}, "$", "Additional properties are not allowed ('assignee'"),
    ({"feedback_types": ["nope"]}, "$.feedback_types[0]", "no feedback type 'nope'"),
    ({"feedback_types": ["triage_quality", "resolution"]}, "$.feedback_types[1]",
     "resolution feedback cannot be given on a run"),
    ({"enters": {"judged_below": {"evaluator": "judge", "feedback_type": "nope",
                                  "field": "x", "threshold": 1}}},
     "$.enters.judged_below.feedback_type", "no feedback type 'nope'"),
    ({"enters": {"judged_below": {"evaluator": "judge", "feedback_type": "resolution",
                                  "field": "resolved", "threshold": 1, "on": "chain"}},
      "feedback_types": ["resolution"]},
     "$.enters.judged_below.field", "its numeric fields are ['minutes_to_mitigate']"),
    ({"enters": {"disagreements": {"evaluator": "judge", "feedback_type": "resolution"}}},
     "$.enters.disagreements.on", "never given on a run; it targets ['chain']"),
    ({"enters": {"pairs": {"evaluator": "judge", "versions": ["2", "3"],
                           "feedback_type": "triage_quality"}}},
     "$.feedback_types", "list 'pairwise_preference'"),
    ({"enters": {"pairs": {"evaluator": "judge", "versions": ["2", "2"],
                           "feedback_type": "triage_quality"}}},
     "$.enters.pairs.versions", "non-unique elements"),
])
def test_a_bad_queue_is_refused_at_its_path(changes: dict[str, Any], path: str,
                                            says: str) -> None:
    with pytest.raises(InvalidQueue) as refused:
        queue_from_dict(a_queue(**changes))
    assert f"at {path}:" in str(refused.value)
    assert says in str(refused.value)
    assert isinstance(refused.value, ValidationFailed)


@st.composite
def candidates(draw: st.DrawFn) -> dict[str, Any]:
    """Queue definitions valid by QUEUE_SCHEMA: half of them fitted to the registered types
    (what the checks accept), the others with any feedback type, field and target kind."""
    names = [*registry.names(), "nope"]
    fits = draw(st.booleans())

    def targeting(kind: str) -> list[str]:
        found = [n for n in registry.names()
                 if (c := registry.get(n)) is not None and kind in c.feedback_targets]
        return found if fits and found else names

    kind = draw(st.sampled_from(["runs_of", "firings_of", "chains", "judged_below",
                                 "disagreements", "pairs"]))
    body: Any
    item = {"runs_of": "run", "firings_of": "firing", "chains": "chain"}.get(kind)
    if kind in ("runs_of", "firings_of"):
        body = "ops:wrong-triage"
    elif kind == "chains":
        body = {}
    else:
        on = draw(st.sampled_from(["run", "firing", "chain"]))
        item = on
        body = {"evaluator": "judge@2", "feedback_type": draw(st.sampled_from(targeting(on)))}
        if on != "run" or draw(st.booleans()):
            body["on"] = on
        if kind == "pairs":
            body["evaluator"] = "judge"
            body["versions"] = draw(st.sampled_from([["2", "3"], ["1", "2"]]))
        if kind == "judged_below":
            cls = registry.get(body["feedback_type"])
            fields = numeric_fields(cls) if fits and cls is not None else []
            body.update(field=draw(st.sampled_from(fields or [
                "minutes_to_mitigate", "confidence", "quality_score", "resolved", "x"])),
                threshold=draw(st.floats(-10, 10)))
    assert item is not None
    return {"name": "q", "enters": {kind: body},
            "feedback_types": draw(st.lists(st.sampled_from(targeting(item)), min_size=1,
                                            max_size=3, unique=True))}


@given(candidates())
def test_the_published_schema_accepts_exactly_what_an_install_accepts(
        data: dict[str, Any]) -> None:
    # queue_schema_for is what the REST document publishes: a definition valid by it must
    # be installed, and one it calls invalid refused, or the contract lies either way.
    from jsonschema import Draft202012Validator

    types = [registry.get(n) for n in registry.names()]
    valid = Draft202012Validator(queue_schema_for(t for t in types if t is not None)
                                 ).is_valid(data)
    try:
        queue_from_dict(data)
        accepted = True
    except InvalidQueue:
        accepted = False
    assert valid == accepted, data


def test_the_published_schema_of_no_types_accepts_nothing() -> None:
    from jsonschema import Draft202012Validator

    assert not Draft202012Validator(queue_schema_for([])).is_valid(a_queue())


def test_text_that_is_not_json_is_refused_with_its_line_and_column() -> None:
    with pytest.raises(InvalidQueue, match="line 2 column 1"):
        parse_queue('{"name": "q",\n}')


# -- installed queues -----------------------------------------------------------------------


def an_entry(**changes: Any) -> QueueEntry:
    """The installed entry of `a_queue()` in workspace prod, with `changes`."""
    fields: dict[str, Any] = {
        "workspace": "prod", "name": "triage-review", "state": "installed",
        "definition": queue_to_dict(queue_from_dict(a_queue())),
        "installed_at_ms": 1_700_000_000_000, "installed_by": "user:ada", **changes}
    return QueueEntry(**fields)


def test_an_entry_survives_its_record_and_garbage_is_refused() -> None:
    entry = an_entry()
    assert QueueEntry.decode(entry.encode()) == entry
    archived = entry.archived(1_700_000_001_000, "user:bo")
    assert not archived.live and QueueEntry.decode(archived.encode()) == archived
    assert entry.key == entry_key("prod", "triage-review") == "prod\ntriage-review"
    for garbage in (b"not json", b"{}", b'{"state": "maybe"}',
                    an_entry(state="maybe").encode()):  # type: ignore[arg-type]
        with pytest.raises(InvalidQueue, match="not a queue entry"):
            QueueEntry.decode(garbage)


def test_an_install_is_new_a_repeat_or_refused_against_what_is_live() -> None:
    installed = {an_entry().key: an_entry()}
    # The same queue, defaults left out or spelled out: a repeat.
    assert check_install(a_queue(), "prod", installed)[1] is True
    assert check_install(an_entry().definition, "prod", installed)[1] is True
    # Another workspace, or nothing installed: new.
    assert check_install(a_queue(), "dev", installed)[1] is False
    assert check_install(a_queue(), "prod", {})[1] is False
    # Another definition under the live name: refused, saying what to do.
    with pytest.raises(QueueNameTaken, match=r"archive it first \(streams queues archive "
                                           r"triage-review\)"):
        check_install(a_queue(reviewers=3), "prod", installed)
    # Once archived, the name is free for a new definition.
    archived = {an_entry().key: an_entry().archived(1, "user:bo")}
    assert check_install(a_queue(reviewers=3), "prod", archived) == \
        (queue_from_dict(a_queue(reviewers=3)), False)

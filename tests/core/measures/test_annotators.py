"""Agreement between people (Krippendorff's alpha), against the textbook's worked example."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from streams.core.feedback import FeedbackRegistry
from streams.core.measures.agreement import Verdict
from streams.core.measures.annotators import krippendorff_alpha, people_agreement

# Krippendorff (2011), "Computing Krippendorff's Alpha-Reliability", the example with missing
# values: 4 coders, 12 units (unit 12 has one value: not pairable).
UNITS = [[1, 1, 1], [2, 2, 3, 2], [3, 3, 3, 3], [3, 3, 3, 3], [2, 2, 2, 2], [1, 2, 3, 4],
         [4, 4, 4, 4], [1, 1, 2, 1], [2, 2, 2, 2], [5, 5, 5], [1, 1], [3]]


def test_the_textbook_example_nominal_and_interval() -> None:
    alpha, ci = krippendorff_alpha(UNITS)
    assert alpha == pytest.approx(0.743, abs=5e-4)
    assert ci is not None and ci[0] <= alpha <= ci[1] and ci[0] >= -1 and ci[1] <= 1
    interval, _ci = krippendorff_alpha(UNITS, numeric=True)
    assert interval == pytest.approx(0.849, abs=5e-4)
    # The same every time: the bootstrap's seed is fixed.
    assert krippendorff_alpha(UNITS) == (alpha, ci)


def test_alpha_is_one_for_full_agreement_and_undefined_without_variety() -> None:
    assert krippendorff_alpha([["a", "a"], ["b", "b"]])[0] == pytest.approx(1.0)
    assert krippendorff_alpha([["a", "a"], ["a", "a"]]) == (None, None)
    assert krippendorff_alpha([["a"], ["b"]]) == (None, None)  # nothing pairable
    alpha, ci = krippendorff_alpha([["a", "b"], ["b", "a"]])
    assert alpha is not None and alpha < 0 and ci is not None


def _verdict(target: str, who: str, **value: object) -> Verdict:
    return Verdict("triage_quality", target, who, who.startswith("user:"), dict(value),
                   datetime(2026, 12, 1, tzinfo=UTC), f"e-{target}-{who}")


def test_people_agreement_per_field_over_targets_two_people_judged() -> None:
    from streams.examples.ops import TriageQuality

    types = FeedbackRegistry()
    types.register(TriageQuality)
    verdicts = [
        _verdict("run:1", "user:ada", correct=True, severity="high"),
        _verdict("run:1", "user:bo", correct=True, severity="low"),
        _verdict("run:2", "user:ada", correct=False, severity="low"),
        _verdict("run:2", "user:bo", correct=False, severity="low"),
        _verdict("run:3", "user:ada", correct=True, severity="low"),   # one person only
        _verdict("run:2", "evaluator:judge@1", correct=True, severity="high"),  # not people
    ]
    found = {a.field: a for a in people_agreement(verdicts, types=types)}
    assert set(found) == {"correct", "severity"}
    correct, severity = found["correct"], found["severity"]
    assert (correct.units, correct.values, correct.observed) == (2, 4, 1.0)
    assert correct.alpha == pytest.approx(1.0) and correct.kind == "bool"
    assert (severity.units, severity.observed) == (2, 0.5)
    assert severity.alpha is not None and severity.alpha < 0.5


def test_a_category_that_is_a_list_or_an_object_is_left_out_not_a_failure() -> None:
    # An unregistered type: its fields are inferred (booleans here); a value of another
    # shape on the same field (an older version of the type) is not a category.
    verdicts = [
        _verdict("run:1", "user:ada", ok=True), _verdict("run:1", "user:bo", ok=True),
        _verdict("run:2", "user:ada", ok=[1, 2]), _verdict("run:2", "user:bo", ok={"a": 1}),
        _verdict("run:3", "user:ada", ok=False), _verdict("run:3", "user:bo", ok=[3]),
    ]
    [ok] = people_agreement(verdicts, types=FeedbackRegistry())
    assert (ok.field, ok.units, ok.values, ok.observed) == ("ok", 1, 2, 1.0)

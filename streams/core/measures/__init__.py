"""End-to-end measures: pure folds over a workspace's envelopes, run offline as reports and
experiments with the same code the workers use. Each takes a workspace handle (read to its
end) or envelopes already read; each `fold_*` twin takes envelopes only, for speed.

See docs/measures.md for each measure's definition and formula.
"""

from streams.core.measures.agreement import (
    CategoricalAgreement,
    FieldAgreement,
    NumericAgreement,
    cohen_kappa,
    fold_judge_agreement,
    judge_agreement,
    spearman,
)
from streams.core.measures.answers import (
    PERIODS,
    FieldAnswers,
    NumberSummary,
    PeriodTrend,
    fold_answers,
    fold_trends,
)
from streams.core.measures.calibration import (
    Calibration,
    CalibrationAlarm,
    CalibrationPolicy,
    calibrate,
)
from streams.core.measures.costs import JudgeCost, ModelPrice, fold_judge_costs, parse_prices
from streams.core.measures.outcomes import RuleOutcome, fold_rule_outcomes, rule_outcomes
from streams.core.measures.quality import QualitySeries, fold_quality, quality
from streams.core.measures.resolution import (
    MeasureError,
    fold_time_to_resolution,
    time_to_resolution,
)
from streams.core.measures.source import LogSource, Readable, envelopes_of

__all__ = [
    "PERIODS",
    "Calibration",
    "CalibrationAlarm",
    "CalibrationPolicy",
    "CategoricalAgreement",
    "FieldAgreement",
    "FieldAnswers",
    "JudgeCost",
    "LogSource",
    "MeasureError",
    "ModelPrice",
    "NumberSummary",
    "NumericAgreement",
    "PeriodTrend",
    "QualitySeries",
    "Readable",
    "RuleOutcome",
    "calibrate",
    "cohen_kappa",
    "envelopes_of",
    "fold_answers",
    "fold_judge_agreement",
    "fold_judge_costs",
    "fold_quality",
    "fold_rule_outcomes",
    "fold_time_to_resolution",
    "fold_trends",
    "judge_agreement",
    "parse_prices",
    "quality",
    "rule_outcomes",
    "spearman",
    "time_to_resolution",
]

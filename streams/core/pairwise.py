"""Pairwise review: two evaluator versions' verdicts on the same target shown side by side,
and a person's preference between them recorded as typed feedback.

A queue whose items enter by `{"pairs": {"evaluator": "triage-judge", "versions": ["2", "3"],
"feedback_type": "triage_quality"}}` (streams.core.queues) holds the targets both versions
judged; a reviewer gives `pairwise_preference` feedback on each:

    PairwisePreference(a="evaluator:triage-judge@2", b="evaluator:triage-judge@3",
                       preferred="b", note="3 saw the deploy")

`display_order(item, seed)` says which of the two a page shows first: by a hash of the item
and the queue, so half the items show `a` first (no side is favoured by its position) and
every reviewer sees one item the same way. `preference_tally` folds preferences into wins,
ties and a win rate with a Wilson interval per pair of versions (docs/measures.md).
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final, Literal

from pydantic import Field

from streams.core.feedback import Feedback

__all__ = [
    "PAIRWISE_PREFERENCE",
    "PairwisePreference",
    "PreferenceTally",
    "display_order",
    "preference_tally",
    "wilson",
]

PAIRWISE_PREFERENCE: Final = "pairwise_preference"

_PARTICIPANT = r"^evaluator:[^\x00-\x1f\x7f]+@[^\x00-\x1f\x7f@]+$"
_Z95 = 1.959963984540054


class PairwisePreference(Feedback, name=PAIRWISE_PREFERENCE,
                         targets={"run", "firing", "chain"}):
    """Which of two evaluator versions' verdicts on one target a person preferred: `a` or
    `b` (each `evaluator:name@version`), or `tie`.

    `a` equal to `b` is accepted (the published schema cannot say two fields differ, and
    what a server accepts is what its document says) and counted nowhere:
    `preference_tally` leaves it out."""

    a: str = Field(pattern=_PARTICIPANT, max_length=300)
    b: str = Field(pattern=_PARTICIPANT, max_length=300)
    preferred: Literal["a", "b", "tie"]
    note: str | None = None


def display_order(item: str, seed: str = "") -> tuple[Literal["a", "b"], Literal["a", "b"]]:
    """Which version a page shows first for `item` (`kind:id`) in the queue `seed`: ("a",
    "b") or ("b", "a"), half the items each way, the same for every reviewer."""
    return ("a", "b") if zlib.crc32(f"{seed}\n{item}".encode()) % 2 == 0 else ("b", "a")


def wilson(successes: float, n: int) -> tuple[float, float] | None:
    """The Wilson score 95% interval of a proportion (None without trials)."""
    if n == 0:
        return None
    p = successes / n
    z2 = _Z95 * _Z95
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = _Z95 * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass(frozen=True)
class PreferenceTally:
    """People's preferences between two versions, `a` and `b` in name order: how often each
    was preferred, ties, and `a`'s win rate (a tie counts half) with its Wilson interval."""

    a: str
    b: str
    a_wins: int
    b_wins: int
    ties: int

    @property
    def n(self) -> int:
        """Preferences counted."""
        return self.a_wins + self.b_wins + self.ties

    @property
    def a_rate(self) -> float | None:
        """`a`'s win rate, a tie counting half; None without preferences."""
        return (self.a_wins + self.ties / 2) / self.n if self.n else None

    @property
    def a_rate_ci(self) -> tuple[float, float] | None:
        """The Wilson 95% interval of `a_rate`."""
        return wilson(self.a_wins + self.ties / 2, self.n)


def preference_tally(
        preferences: Iterable[tuple[str, str, PairwisePreference]]) -> list[PreferenceTally]:
    """Tally (participant, target, preference) triples, oldest first: each person's latest
    preference per target and pair of versions counts (a person who changed their mind
    counts once), oriented so `a` is the version first in name order; a preference whose `a`
    and `b` are the same version is left out. Sorted by the pair."""
    latest: dict[tuple[str, str, str, str], PairwisePreference] = {}
    for participant, target, preference in preferences:
        if preference.a == preference.b:
            continue  # no pair of versions: nothing preferred
        a, b = sorted((preference.a, preference.b))
        latest[(participant, target, a, b)] = preference
    counts: dict[tuple[str, str], list[int]] = {}
    for (_who, _target, a, b), preference in latest.items():
        wins = counts.setdefault((a, b), [0, 0, 0])
        if preference.preferred == "tie":
            wins[2] += 1
        else:
            chosen = preference.a if preference.preferred == "a" else preference.b
            wins[0 if chosen == a else 1] += 1
    return [PreferenceTally(a, b, *wins) for (a, b), wins in sorted(counts.items())]

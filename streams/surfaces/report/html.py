"""The report as ONE self-contained HTML page: inline CSS, charts as inline SVG drawn here.

Pure: it takes the dict of `build_report` and returns text; no network, no script, no CDN.
Each chart is an `<svg class="chart" data-chart="NAME">` whose data marks (bars, points,
lines) carry the class `mark` and a `<title>` with their numbers; a chart without data says
so in the SVG instead. Charts: `rule-outcomes`, `time-to-resolution`, `judge-agreement`,
`answers`, `feedback-trend`, `agreement-trend`, `quality`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from html import escape
from typing import Any

from streams.core.rules.why import OUTCOMES

__all__ = ["CHARTS", "duration", "render_html"]

CHARTS = ("rule-outcomes", "time-to-resolution", "judge-agreement", "answers",
          "feedback-trend", "agreement-trend", "quality")

WIDTH = 720
LEFT = 200
RIGHT = 24
PALETTE = ("#2563eb", "#d97706", "#059669", "#dc2626", "#7c3aed", "#0891b2", "#be185d",
           "#4d7c0f")
OUTCOME_COLORS = {"succeeded": "#059669", "dead_lettered": "#dc2626",
                  "in_progress": "#9ca3af"}

CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2rem auto;
       max-width: 780px; color: #111827; padding: 0 1rem; }
h1 { font-size: 1.5rem; margin-bottom: 0.25rem; }
h2 { font-size: 1.15rem; margin-top: 2rem; border-bottom: 1px solid #e5e7eb; }
p.meta { color: #4b5563; margin-top: 0; }
table { border-collapse: collapse; font-size: 0.85rem; margin-top: 0.5rem; }
th, td { padding: 0.2rem 0.6rem; text-align: right; border-bottom: 1px solid #f3f4f6; }
th:first-child, td:first-child { text-align: left; }
svg.chart { display: block; margin-top: 0.5rem; }
svg text { font-size: 11px; fill: #374151; }
svg .axis { stroke: #9ca3af; stroke-width: 1; }
svg .grid { stroke: #e5e7eb; stroke-width: 1; }
svg text.empty { font-size: 13px; fill: #6b7280; }
"""


def duration(seconds: float) -> str:
    """A short human duration: 45s, 12.5m, 3.2h, 2.1d."""
    if seconds < 60:
        return f"{seconds:.3g}s"
    if seconds < 3600:
        return f"{seconds / 60:.3g}m"
    if seconds < 86400:
        return f"{seconds / 3600:.3g}h"
    return f"{seconds / 86400:.3g}d"


def _num(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _money(value: float) -> str:
    # Per-verdict prices are fractions of a cent: enough digits to tell judges apart.
    return f"{value:.4g}" if 0 < abs(value) < 0.01 else f"{value:.2f}"


def _pct(value: float) -> str:
    return f"{100 * value:.1f}%"


def _svg(name: str, height: int, body: list[str], label: str) -> str:
    return (f'<svg class="chart" data-chart="{name}" xmlns="http://www.w3.org/2000/svg" '
            f'width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" role="img" '
            f'aria-label="{escape(label)}">' + "".join(body) + "</svg>")


def _empty(name: str, why: str) -> str:
    return _svg(name, 60, [f'<text class="empty" x="10" y="34">{escape(why)}</text>'], why)


def _title(text: str) -> str:
    return f"<title>{escape(text)}</title>"


def _ticks(top: float, count: int = 5) -> list[float]:
    """Round tick values from 0 to at least `top`."""
    if top <= 0:
        return [0.0, 1.0]
    raw = top / count
    power = 10.0 ** math.floor(math.log10(raw))
    step = next(f * power for f in (1, 2, 5, 10) if f * power >= raw)
    return [i * step for i in range(math.ceil(top / step - 1e-9) + 1)]


def _rule_outcomes(rows: Sequence[dict[str, Any]]) -> str:
    name = "rule-outcomes"
    if not rows:
        return _empty(name, "no runs in this window")
    row_h, top, plot = 26, 28, WIDTH - LEFT - RIGHT
    most = max(r["runs"] for r in rows) or 1
    height = top + row_h * len(rows) + 30
    body: list[str] = []
    x = LEFT
    for i, (key, color) in enumerate(OUTCOME_COLORS.items()):
        lx = LEFT + i * 130
        body.append(f'<rect x="{lx}" y="6" width="10" height="10" fill="{color}"/>'
                    f'<text x="{lx + 14}" y="15">{key.replace("_", " ")}</text>')
    for i, row in enumerate(rows):
        y = top + i * row_h
        body.append(f'<text x="{LEFT - 8}" y="{y + 15}" text-anchor="end">'
                    f'{escape(row["rule"])}</text>')
        x = LEFT
        for key, color in OUTCOME_COLORS.items():
            count = row[key]
            if not count:
                continue
            w = plot * count / most
            tip = _title(f"{row['rule']}: {count} {key.replace('_', ' ')}")
            body.append(f'<rect class="mark" x="{x:.1f}" y="{y + 3}" width="{w:.1f}" '
                        f'height="{row_h - 8}" fill="{color}">{tip}</rect>')
            x += w
        body.append(f'<text x="{x + 4:.1f}" y="{y + 15}">{row["runs"]}</text>')
    axis_y = top + row_h * len(rows)
    body.append(f'<line class="axis" x1="{LEFT}" y1="{top}" x2="{LEFT}" y2="{axis_y}"/>')
    body.append(f'<text x="{LEFT}" y="{axis_y + 18}">runs (0 to {most})</text>')
    return _svg(name, height, body, "runs per rule by outcome")


def _time_to_resolution(section: dict[str, Any]) -> str:
    name = "time-to-resolution"
    bins = section["histogram"]
    if not bins:
        return _empty(name, f"no chain reached a {section['resolves']} event in this window")
    top, bottom, plot_h = 16, 44, 200
    left = 50
    plot_w = WIDTH - left - RIGHT
    height = top + plot_h + bottom
    most = max(b["count"] for b in bins)
    ticks = _ticks(most)
    scale = plot_h / ticks[-1]
    body: list[str] = []
    for tick in ticks:
        y = top + plot_h - tick * scale
        body.append(f'<line class="grid" x1="{left}" y1="{y:.1f}" x2="{WIDTH - RIGHT}" '
                    f'y2="{y:.1f}"/><text x="{left - 6}" y="{y + 4:.1f}" '
                    f'text-anchor="end">{tick:g}</text>')
    w = plot_w / len(bins)
    for i, b in enumerate(bins):
        x = left + i * w
        h = b["count"] * scale
        label = f"{duration(b['from'])} to {duration(b['to'])}: {b['count']} chains"
        if b["count"]:
            body.append(f'<rect class="mark" x="{x + 1:.1f}" y="{top + plot_h - h:.1f}" '
                        f'width="{max(1.0, w - 2):.1f}" height="{h:.1f}" fill="{PALETTE[0]}">'
                        f'{_title(label)}</rect>')
        if len(bins) <= 12 or i % 2 == 0:
            body.append(f'<text x="{x:.1f}" y="{top + plot_h + 14}" text-anchor="middle">'
                        f'{duration(b["from"])}</text>')
    body.append(f'<text x="{left + plot_w:.1f}" y="{top + plot_h + 14}" text-anchor="end">'
                f'{duration(bins[-1]["to"])}</text>')
    body.append(f'<line class="axis" x1="{left}" y1="{top + plot_h}" x2="{WIDTH - RIGHT}" '
                f'y2="{top + plot_h}"/>')
    body.append(f'<text x="{left + plot_w / 2:.1f}" y="{height - 6}" text-anchor="middle">'
                f'time from the chain\'s first event to its first '
                f'{escape(section["resolves"])} (chains per bin)</text>')
    return _svg(name, height, body, "distribution of times to resolution")


def _agreement_value(row: dict[str, Any]) -> tuple[float | None, list[float] | None, str]:
    if row["kind"] == "numeric":
        return row["spearman"], row["spearman_ci"], "Spearman rho"
    return row["kappa"], row["kappa_ci"], "Cohen's kappa"


def _judge_agreement(rows: Sequence[dict[str, Any]]) -> str:
    name = "judge-agreement"
    if not rows:
        return _empty(name, "no target judged by both an evaluator and a person")
    row_h, top = 26, 24
    plot = WIDTH - LEFT - RIGHT
    height = top + row_h * len(rows) + 34
    evaluators = sorted({r["evaluator"] for r in rows})
    colors = {e: PALETTE[i % len(PALETTE)] for i, e in enumerate(evaluators)}

    def x_of(value: float) -> float:
        return LEFT + plot * (value + 1.0) / 2.0

    body: list[str] = []
    for tick in (-1.0, -0.5, 0.0, 0.5, 1.0):
        x = x_of(tick)
        body.append(f'<line class="{"axis" if tick == 0 else "grid"}" x1="{x:.1f}" '
                    f'y1="{top}" x2="{x:.1f}" y2="{top + row_h * len(rows)}"/>'
                    f'<text x="{x:.1f}" y="{top + row_h * len(rows) + 14}" '
                    f'text-anchor="middle">{tick:g}</text>')
    for i, row in enumerate(rows):
        y = top + i * row_h + row_h / 2
        value, ci, measure = _agreement_value(row)
        color = colors[row["evaluator"]]
        label = f"{row['evaluator']} · {row['feedback_type']}.{row['field']}"
        body.append(f'<text x="{LEFT - 8}" y="{y + 4:.1f}" text-anchor="end">'
                    f'{escape(row["feedback_type"])}.{escape(row["field"])}</text>')
        if value is None:
            body.append(f'<text x="{x_of(0) + 6:.1f}" y="{y + 4:.1f}">{measure} undefined '
                        f'(n={row["n"]})</text>')
            continue
        tip = _title(f"{label}: {measure} = {value:.3f}"
                     + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "") + f", n = {row['n']}")
        if ci:
            body.append(f'<line class="mark" x1="{x_of(ci[0]):.1f}" y1="{y:.1f}" '
                        f'x2="{x_of(ci[1]):.1f}" y2="{y:.1f}" stroke="{color}" '
                        f'stroke-width="2">{tip}</line>')
        body.append(f'<circle class="mark" cx="{x_of(value):.1f}" cy="{y:.1f}" r="5" '
                    f'fill="{color}">{tip}</circle>')
    legend_y = height - 6
    for i, evaluator in enumerate(evaluators):
        lx = LEFT + i * 240
        body.append(f'<circle cx="{lx + 5}" cy="{legend_y - 4}" r="5" '
                    f'fill="{colors[evaluator]}"/><text x="{lx + 14}" y="{legend_y}">'
                    f'{escape(evaluator)}</text>')
    return _svg(name, height, body, "agreement of each evaluator version with people")


def _answers(rows: Sequence[dict[str, Any]]) -> str:
    """One bar per field and side: the shares of each label for yes/no and categorical
    fields (stacked), the range, quartiles and median for numbers (on the field's range
    over every side)."""
    name = "answers"
    if not rows:
        return _empty(name, "no feedback from people or evaluators in this window")
    row_h, top = 22, 8
    plot = WIDTH - LEFT - RIGHT
    height = top + row_h * len(rows) + 30
    spans: dict[tuple[str, str], tuple[float, float]] = {}
    for row in rows:
        if row["numbers"] is not None:
            key = (row["feedback_type"], row["field"])
            low, high = spans.get(key, (row["numbers"]["min"], row["numbers"]["max"]))
            spans[key] = (min(low, row["numbers"]["min"]), max(high, row["numbers"]["max"]))
    labels = sorted({c["label"] for r in rows for c in r["counts"]})
    colors = {label: PALETTE[i % len(PALETTE)] for i, label in enumerate(labels)}
    body: list[str] = []
    for i, row in enumerate(rows):
        y = top + i * row_h
        what = f"{row['feedback_type']}.{row['field']}"
        who = row["who"]
        label = f"{row['field']} · {who.removeprefix('evaluator:')}"
        short = label if len(label) <= 29 else label[:28] + "…"  # the title has it whole
        body.append(f'<text x="{LEFT - 8}" y="{y + 14}" text-anchor="end">'
                    f'{_title(f"{what}: {who}")}{escape(short)}</text>')
        if row["numbers"] is not None:
            numbers = row["numbers"]
            low, high = spans[(row["feedback_type"], row["field"])]
            width = (high - low) or 1.0

            def x_of(value: float, low: float = low, width: float = width) -> float:
                return LEFT + plot * (value - low) / width

            tip = _title(f"{row['who']} on {what}: min {numbers['min']:.3g}, quartiles "
                         f"{numbers['p25']:.3g} / {numbers['p50']:.3g} / "
                         f"{numbers['p75']:.3g}, max {numbers['max']:.3g}, mean "
                         f"{numbers['mean']:.3g} (n={row['n']})")
            body.append(f'<line class="axis" x1="{x_of(numbers["min"]):.1f}" y1="{y + 10}" '
                        f'x2="{x_of(numbers["max"]):.1f}" y2="{y + 10}"/>')
            box = max(2.0, x_of(numbers["p75"]) - x_of(numbers["p25"]))
            body.append(f'<rect class="mark" x="{x_of(numbers["p25"]):.1f}" y="{y + 3}" '
                        f'width="{box:.1f}" height="14" fill="#93c5fd">{tip}</rect>')
            body.append(f'<line x1="{x_of(numbers["p50"]):.1f}" y1="{y + 3}" '
                        f'x2="{x_of(numbers["p50"]):.1f}" y2="{y + 17}" stroke="#1e3a8a" '
                        'stroke-width="2"/>')
            continue
        x = float(LEFT)
        for count in row["counts"]:
            width = plot * count["share"]
            tip = _title(f"{row['who']} on {what}: {count['label']} {count['count']} of "
                         f"{row['n']} ({_pct(count['share'])})")
            body.append(f'<rect class="mark" x="{x:.1f}" y="{y + 3}" width="{width:.1f}" '
                        f'height="14" fill="{colors[count["label"]]}">{tip}</rect>')
            if width > 36:
                body.append(f'<text x="{x + 4:.1f}" y="{y + 14}" fill="#fff">'
                            f'{escape(count["label"][:12])}</text>')
            x += width
    legend_y = height - 8
    for i, label in enumerate(labels[:8]):
        lx = LEFT + i * 64
        body.append(f'<rect x="{lx}" y="{legend_y - 9}" width="10" height="10" '
                    f'fill="{colors[label]}"/><text x="{lx + 14}" y="{legend_y}">'
                    f'{escape(label[:8])}</text>')
    return _svg(name, height, body, "how people and each evaluator version answered")


def _axes(left: float, bottom: float, low: float, high: float,
          y_of: Callable[[float], float], ticks: Sequence[tuple[float, str]],
          unit: str = "") -> list[str]:
    """A line chart's horizontal grid (five values from `low` to `high`) and its x labels
    (at most about eight of `ticks`, the last always)."""
    body: list[str] = []
    for k in range(5):
        value = low + (high - low) * k / 4
        y = y_of(value)
        body.append(f'<line class="grid" x1="{left}" y1="{y:.1f}" x2="{WIDTH - RIGHT}" '
                    f'y2="{y:.1f}"/><text x="{left - 6}" y="{y + 4:.1f}" '
                    f'text-anchor="end">{value:.3g}{unit}</text>')
    step = max(1, math.ceil(len(ticks) / 8))
    for i, (x, label) in enumerate(ticks):
        if i % step == 0 or i == len(ticks) - 1:
            body.append(f'<text x="{x:.1f}" y="{bottom + 14}" '
                        f'text-anchor="middle">{escape(label)}</text>')
    return body


def _lines(name: str, periods: Sequence[str], series: dict[str, list[float | None]],
           label: str, *, unit: str = "", top_value: float | None = None) -> str:
    """A line per series over the periods (None: no point in that period)."""
    values = [v for points in series.values() for v in points if v is not None]
    top, plot_h, left = 16, 160, 60
    plot_w = WIDTH - left - RIGHT
    height = top + plot_h + 40 + 18 * math.ceil(len(series) / 3)
    high = top_value if top_value is not None else (_ticks(max(values))[-1]
                                                    if values and max(values) > 0 else 1.0)
    inset = 36

    def x_of(i: int) -> float:
        if len(periods) == 1:
            return left + plot_w / 2
        return left + inset + (plot_w - 2 * inset) * i / (len(periods) - 1)

    def y_of(value: float) -> float:
        return top + plot_h * (1 - value / high)

    body = _axes(left, top + plot_h, 0.0, high, y_of,
                 [(x_of(i), period) for i, period in enumerate(periods)], unit)
    for j, (what, points) in enumerate(series.items()):
        color = PALETTE[j % len(PALETTE)]
        drawn = [(x_of(i), y_of(v), periods[i], v) for i, v in enumerate(points)
                 if v is not None]
        if len(drawn) > 1:
            path = " ".join(f"{x:.1f},{y:.1f}" for x, y, _p, _v in drawn)
            body.append(f'<polyline class="mark" points="{path}" fill="none" '
                        f'stroke="{color}" stroke-width="2">{_title(what)}</polyline>')
        for x, y, period, value in drawn:
            body.append(f'<circle class="mark" cx="{x:.1f}" cy="{y:.1f}" r="4" '
                        f'fill="{color}">{_title(f"{what} in {period}: {value:.3g}{unit}")}'
                        "</circle>")
        lx = left + (j % 3) * 220
        ly = top + plot_h + 34 + 18 * (j // 3)
        body.append(f'<rect x="{lx}" y="{ly - 9}" width="10" height="10" fill="{color}"/>'
                    f'<text x="{lx + 14}" y="{ly}">{escape(what[:32])}</text>')
    body.append(f'<line class="axis" x1="{left}" y1="{top + plot_h}" x2="{WIDTH - RIGHT}" '
                f'y2="{top + plot_h}"/>')
    return _svg(name, height, body, label)


def _feedback_trend(trends: dict[str, Any]) -> str:
    name = "feedback-trend"
    periods = trends["periods"]
    if not periods:
        return _empty(name, "no feedback in this window")
    return _lines(name, [p["period"] for p in periods], {
        "feedback from people": [float(p["people"]) for p in periods],
        "feedback from evaluators": [float(p["evaluators"]) for p in periods],
        "scores": [float(p["scores"]) for p in periods],
    }, f"feedback and scores per {trends['per']}")


def _agreement_trend(trends: dict[str, Any]) -> str:
    """Observed agreement (the share of pairs that agree) per evaluator version and
    yes/no or categorical field, per period."""
    name = "agreement-trend"
    periods = trends["periods"]
    keys = sorted({(a["evaluator"], f"{a['feedback_type']}.{a['field']}") for p in periods
                   for a in p["agreement"] if a["observed"] is not None})
    if not keys:
        return _empty(name, "no yes/no or categorical field judged by both sides")
    series: dict[str, list[float | None]] = {}
    for evaluator, field in keys:
        by_period = {p["period"]: a["observed"] for p in periods for a in p["agreement"]
                     if (a["evaluator"], f"{a['feedback_type']}.{a['field']}")
                     == (evaluator, field)}
        series[f"{evaluator.removeprefix('evaluator:')} {field.rpartition('.')[2]}"] = [
            None if by_period.get(p["period"]) is None else 100 * by_period[p["period"]]
            for p in periods]
    return _lines(name, [p["period"] for p in periods], series,
                  f"observed agreement with people per {trends['per']}", unit="%",
                  top_value=100.0)


def _quality(section: dict[str, Any]) -> str:
    name = "quality"
    agents = section["agents"]
    what = f"{section['feedback_type']}.{section['field']}"
    if not agents:
        return _empty(name, f"no {what} feedback in this window")
    days = sorted({d["day"] for a in agents for d in a["by_day"]})
    means = [float(d["mean"]) for a in agents for d in a["by_day"]]
    low, high = min(means), max(means)
    if high == low:
        low, high = low - 1.0, high + 1.0
    pad = (high - low) * 0.1
    low, high = low - pad, high + pad
    top, plot_h, left = 16, 200, 60
    plot_w = WIDTH - left - RIGHT
    height = top + plot_h + 40 + 18 * math.ceil(len(agents) / 3)

    inset = 36  # room for the first and last day's labels

    def x_of(day: str) -> float:
        if len(days) == 1:
            return left + plot_w / 2
        return left + inset + (plot_w - 2 * inset) * days.index(day) / (len(days) - 1)

    def y_of(value: float) -> float:
        return top + plot_h * (high - value) / (high - low)

    body = _axes(left, top + plot_h, low, high, y_of, [(x_of(day), day) for day in days])
    for i, agent in enumerate(agents):
        color = PALETTE[i % len(PALETTE)]
        points = [(x_of(d["day"]), y_of(d["mean"]), d) for d in agent["by_day"]]
        if len(points) > 1:
            path = " ".join(f"{x:.1f},{y:.1f}" for x, y, _d in points)
            tip = _title(f"{agent['rule']}: mean {agent['mean']:.3g} over {agent['n']}")
            body.append(f'<polyline class="mark" points="{path}" fill="none" '
                        f'stroke="{color}" stroke-width="2">{tip}</polyline>')
        for x, y, d in points:
            tip = _title(f"{agent['rule']} on {d['day']}: {d['mean']:.3g} (n={d['n']})")
            body.append(f'<circle class="mark" cx="{x:.1f}" cy="{y:.1f}" r="4" '
                        f'fill="{color}">{tip}</circle>')
        lx = left + (i % 3) * 220
        ly = top + plot_h + 34 + 18 * (i // 3)
        body.append(f'<rect x="{lx}" y="{ly - 9}" width="10" height="10" fill="{color}"/>'
                    f'<text x="{lx + 14}" y="{ly}">{escape(agent["rule"])} '
                    f'(mean {agent["mean"]:.3g}, n={agent["n"]})</text>')
    body.append(f'<line class="axis" x1="{left}" y1="{top + plot_h}" x2="{WIDTH - RIGHT}" '
                f'y2="{top + plot_h}"/>')
    return _svg(name, height, body, f"mean {what} per agent and day")


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    # Headers are this module's own constants (HTML entities allowed); cells are escaped.
    head = "".join(f"<th>{h}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in row) + "</tr>"
                   for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _people_table(rows: Sequence[dict[str, Any]]) -> str:
    if not rows:
        return "<p>No target was judged by two people or more.</p>"
    return _table(
        ("between people: field", "targets", "values", "agree", "&alpha; [95% CI]"),
        [(f"{r['feedback_type']}.{r['field']}", str(r["units"]), str(r["values"]),
          "-" if r["observed"] is None else _pct(r["observed"]),
          _num(r["alpha"]) + ("" if r["alpha_ci"] is None else
                              f" [{_num(r['alpha_ci'][0])}, {_num(r['alpha_ci'][1])}]"))
         for r in rows])


def _preferences(rows: Sequence[dict[str, Any]]) -> str:
    if not rows:
        return "<p>No pairwise preference was given in this window.</p>"
    return _table(
        ("a", "b", "n", "a preferred", "b preferred", "ties", "a's win rate [95% CI]"),
        [(r["a"], r["b"], str(r["n"]), str(r["a_wins"]), str(r["b_wins"]), str(r["ties"]),
          f"{_pct(r['a_rate'])} [{_pct(r['a_rate_ci'][0])}, {_pct(r['a_rate_ci'][1])}]")
         for r in rows])


def _agreement_table(rows: Sequence[dict[str, Any]]) -> str:
    return _table(
        ("evaluator", "field", "n", "agree", "&kappa; [95% CI]", "MAE", "&rho; [95% CI]"),
        [(r["evaluator"], f"{r['feedback_type']}.{r['field']}", str(r["n"]),
          "-" if r["observed"] is None else _pct(r["observed"]),
          _num(r["kappa"]) + (f" [{_num(r['kappa_ci'][0])}, {_num(r['kappa_ci'][1])}]"
                              if r["kappa_ci"] else ""),
          _num(r["mae"]),
          _num(r["spearman"]) + (f" [{_num(r['spearman_ci'][0])}, "
                                 f"{_num(r['spearman_ci'][1])}]" if r["spearman_ci"] else ""))
         for r in rows])


def _answers_table(rows: Sequence[dict[str, Any]]) -> str:
    return _table(
        ("field", "who", "n", "answers"),
        [(f"{r['feedback_type']}.{r['field']}", r["who"], str(r["n"]),
          ", ".join(f"{c['label']} {_pct(c['share'])}" for c in r["counts"])
          if r["numbers"] is None else
          "min {min:.3g}, p25 {p25:.3g}, median {p50:.3g}, p75 {p75:.3g}, max {max:.3g}, "
          "mean {mean:.3g}".format(**r["numbers"]))
         for r in rows])


def _queues(sections: Sequence[dict[str, Any]]) -> list[str]:
    """A part per annotation queue: its agreement and answers on its items."""
    if not sections:
        return ["<p>No annotation queue is live in this workspace.</p>"]
    parts: list[str] = []
    for q in sections:
        parts.append(f"<h3>{escape(q['queue'])}</h3>")
        parts.append(f"<p>{q['items']} items, {q['judged']} with a verdict.</p>")
        if q.get("people_agreement"):
            parts.append(_people_table(q["people_agreement"]))
        if q["judge_agreement"]:
            parts.append(_agreement_table(q["judge_agreement"]))
        if q["answers"]:
            parts.append(_answers_table(q["answers"]))
    return parts


def _why(rows: Sequence[dict[str, Any]]) -> str:
    """The why part: one row per rule, a column per outcome some rule reached."""
    if not rows:
        return "<p>No rules were given (--rules) or installed.</p>"
    seen = {o for row in rows for o in row["outcomes"]}
    columns = [o for o in OUTCOMES if o in seen]
    return _table(("rule", "watched", *(c.replace("_", " ") for c in columns)),
                  [(r["rule"], str(r["watched"]),
                    *(str(r["outcomes"].get(c, 0)) for c in columns)) for r in rows])


def render_html(report: dict[str, Any]) -> str:
    """The page of a report made by `build_report`."""
    window = (f"{report['since'] or 'the beginning'} to {report['until'] or 'the end'}")
    ttr = report["time_to_resolution"]
    stats = ttr["seconds"]
    summary = (f"{ttr['chains']} chains resolved; median {duration(stats['p50'])}, "
               f"90th percentile {duration(stats['p90'])}, longest {duration(stats['max'])}"
               if stats else f"no chain reached a {ttr['resolves']} event")
    outcomes = _table(
        ("rule", "runs", "succeeded", "dead-lettered", "in progress", "dead-letter rate",
         "retry rate", "intervention rate"),
        [(r["rule"], str(r["runs"]), str(r["succeeded"]), str(r["dead_lettered"]),
          str(r["in_progress"]), _pct(r["dead_letter_rate"]), _pct(r["retry_rate"]),
          _pct(r["intervention_rate"])) for r in report["rule_outcomes"]])
    agreement = _agreement_table(report["judge_agreement"])
    answers = _answers_table(report["answers"])
    costs = _table(
        ("evaluator", "model", "verdicts", "reused", "calls", "tokens in / out", "cost",
         "per verdict"),
        [(f"{r['evaluator']}@{r['version']}", ", ".join(r["models"]) or "none",
          str(r["verdicts"]), str(r["reused"]), str(r["calls"]),
          f"{r['prompt_tokens']:,} / {r['completion_tokens']:,}",
          _money(r["cost"]) + (f" (+{r['unpriced_calls']} calls unpriced)"
                               if r["unpriced_calls"] else ""),
          "-" if r["cost_per_verdict"] is None else _money(r["cost_per_verdict"]))
         for r in report["judge_costs"]]) if report["judge_costs"] else (
        "<p>No evaluator gave a verdict in this window.</p>")
    trends = report["trends"]
    trend_rows = _table(
        (trends["per"], "people", "evaluators", "scores", "agreement (observed, pairs)"),
        [(p["period"], str(p["people"]), str(p["evaluators"]), str(p["scores"]),
          "; ".join(f"{a['evaluator'].removeprefix('evaluator:')} {a['field']} "
                    + (f"{_pct(a['observed'])}" if a["observed"] is not None
                       else f"MAE {_num(a['mae'])}") + f" ({a['n']})"
                    for a in p["agreement"]) or "-")
         for p in trends["periods"]])
    quality = report["quality"]
    proposals = report["proposals"]
    conversion = proposals["rule_conversion"]
    rates = _table(
        ("rule whose run proposed", "resolved", "accepted", "edited", "rejected",
         "acceptance rate", "edit rate"),
        [(r["rule"], str(r["resolved"]), str(r["accepted"]), str(r["edited"]),
          str(r["rejected"]), _pct(r["acceptance_rate"]), _pct(r["edit_rate"]))
         for r in proposals["rates"]]) if proposals["rates"] else (
        "<p>No proposal of a rule's run was resolved in this window.</p>")
    rewritten = _table(
        ("artifact", "kind", "versions", "rewrites", "rewrite share", "mean edit ratio"),
        [(a["artifact_id"], a["kind"], str(a["versions"]), str(a["rewrites"]),
          _pct(a["rewrite_share"]), _num(a["mean_edit_ratio"]))
         for a in proposals["artifacts"]]) if proposals["artifacts"] else ""
    parts = [
        "<!doctype html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>feedback-streams report: {escape(report['tenant'])}/"
        f"{escape(report['workspace'])}</title>",
        f"<style>{CSS}</style></head><body>",
        f"<h1>{escape(report['tenant'])} / {escape(report['workspace'])}</h1>",
        f'<p class="meta">{report["events"]} events, {escape(window)}; generated '
        f'{escape(report["generated_at"])}. Definitions: docs/measures.md.</p>',
        "<h2>Rule outcomes</h2>",
        _rule_outcomes(report["rule_outcomes"]),
        outcomes,
        "<h2>Time to resolution</h2>",
        f"<p>{escape(summary)}.</p>",
        _time_to_resolution(ttr),
        "<h2>Judge agreement per evaluator version</h2>",
        "<p>Cohen's &kappa; for yes/no and categorical fields, Spearman's &rho; for numbers; "
        "lines are 95% intervals. 1 is full agreement, 0 what chance gives; "
        "<em>agree</em> is the share of pairs that gave the same answer, which &kappa; "
        "discounts by what chance gives.</p>",
        _judge_agreement(report["judge_agreement"]),
        agreement,
        "<h2>Agreement between people</h2>",
        "<p>Krippendorff's &alpha; per field over the targets two people or more judged "
        "(each person's latest verdict): 1 is full agreement, 0 what chance gives; nominal "
        "for yes/no and categories, interval for numbers; 95% bootstrap intervals. "
        "<em>agree</em> is the share of pairs of people that gave the same answer.</p>",
        _people_table(report.get("people_agreement", [])),
        "<h2>What each judge cost</h2>",
        "<p>Verdicts the evaluator versions gave, those given again from a recorded verdict "
        "(no call), the calls paid for, their tokens and their price by STREAMS_LLM_PRICES; "
        "a call whose model has no price or reported no tokens is counted as unpriced, "
        "never as free.</p>",
        costs,
        "<h2>How people and each evaluator version answered</h2>",
        "<p>Each participant's latest verdict per target: shares of each answer for yes/no "
        "and categorical fields; range, quartiles (box) and median (bar) for numbers.</p>",
        _answers(report["answers"]),
        answers,
        "<h2>Why rules did or did not act</h2>",
        "<p>For each rule, the events of the window it watches, by what it did with them: "
        "left out by its filters or sampling, counted, throttled, not decided yet, or fired "
        "and how its run ended (docs/rules.md).</p>",
        _why(report.get("why", [])),
        "<h2>Pairwise preferences between evaluator versions</h2>",
        "<p>People's preferences between two versions' verdicts on the same target (each "
        "person's latest per target): how often each was preferred, ties, and the first "
        "version's win rate (a tie counts half) with its 95% Wilson interval.</p>",
        _preferences(report.get("preferences", [])),
        "<h2>Per annotation queue</h2>",
        "<p>Agreement between people, judge agreement and answers again, on the verdicts "
        "given on each live queue's items.</p>",
        *_queues(report.get("queues", [])),
        f"<h2>Trends per {escape(trends['per'])}</h2>",
        "<p>Feedback events given by people and by evaluators, and the scores they carried; "
        "below, the share of pairs where an evaluator version and a person agreed, counted "
        "in the period its later verdict fell in (UTC).</p>",
        _feedback_trend(trends),
        _agreement_trend(trends),
        trend_rows,
        "<h2>Quality per agent over time</h2>",
        f"<p>Mean {escape(quality['feedback_type'])}.{escape(quality['field'])} per rule "
        "whose run was judged, per UTC day.</p>",
        _quality(quality),
        "<h2>Proposals</h2>",
        "<p>How people resolved what each rule's runs proposed (first resolutions in the "
        "window; definitions: docs/proposals.md).</p>",
        rates,
        f"<p>Rule drafts: {conversion['proposed']} proposed, {conversion['accepted']} "
        f"accepted, {conversion['installed']} installed, {conversion['survived']} still live "
        f"after {conversion['survival_days']:g} days, {conversion['pending']} installed and "
        f"within that period (as of {escape(conversion['now'])}).</p>",
        rewritten,
        "</body></html>",
    ]
    return "\n".join(parts) + "\n"

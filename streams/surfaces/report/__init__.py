"""Reports of a workspace's log: the measures as report.json and one self-contained HTML page.

`model` (measures -> JSON-ready dict) and `html` (dict -> page) are pure and import no Kafka;
`run` reads the tenant's log through the runtime and writes both files
(`streams report`, and the demo).
"""

from streams.surfaces.report.html import CHARTS, render_html
from streams.surfaces.report.model import (
    DEFAULT_QUALITY,
    DEFAULT_RESOLVES,
    REPORT_FORMAT,
    ReportError,
    build_report,
)

__all__ = [
    "CHARTS",
    "DEFAULT_QUALITY",
    "DEFAULT_RESOLVES",
    "REPORT_FORMAT",
    "ReportError",
    "build_report",
    "render_html",
]

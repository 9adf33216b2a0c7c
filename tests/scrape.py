"""Reading a process's /metrics, /healthz and /readyz in tests (loopback only)."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from streams.settings import Settings
from tests.conftest import REPO

__all__ = ["Samples", "get", "health", "mirror_caught_up", "scrape", "sink_caught_up",
           "start_duckdb_sink"]


def start_duckdb_sink(settings: Settings, tmp_path: Path,
                      cursor: str = "warehouse") -> subprocess.Popen[bytes]:
    """`streams sink duckdb` on `settings` with a cursor, its output in tmp_path/sink.log
    (the caller stops it)."""
    with (tmp_path / "sink.log").open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "streams", "sink", "duckdb", "--path",
             str(tmp_path / "w.duckdb"), "--cursor", cursor],
            env=settings.child_env(), stdout=out, stderr=subprocess.STDOUT, cwd=REPO)


def get(port: int, path: str, timeout: float = 5.0) -> tuple[int, bytes]:
    """(status, body) of GET http://127.0.0.1:port/path; status 0 when nothing answers."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()
    except OSError:
        return 0, b""


def health(port: int, path: str) -> tuple[int, dict[str, Any]]:
    """(status, JSON body) of /healthz or /readyz; status 0 when nothing answers."""
    status, body = get(port, path)
    return status, (json.loads(body) if status else {})


class Samples:
    """One scrape: every sample's name, labels and value."""

    def __init__(self, text: str) -> None:
        self.rows: list[tuple[str, dict[str, str], float]] = [
            (s.name, dict(s.labels), s.value)
            for family in text_string_to_metric_families(text) for s in family.samples]

    def select(self, name: str, **labels: str) -> list[tuple[dict[str, str], float]]:
        """The samples of `name` whose labels include `labels`."""
        return [(lab, v) for n, lab, v in self.rows
                if n == name and all(lab.get(k) == want for k, want in labels.items())]

    def total(self, name: str, **labels: str) -> float:
        """The sum of the samples of `name` with those labels (0 when none)."""
        return sum(v for _lab, v in self.select(name, **labels))


def scrape(port: int) -> Samples | None:
    """The process's metrics now, or None when /metrics does not answer 200."""
    status, body = get(port, "/metrics")
    return Samples(body.decode()) if status == 200 else None


def mirror_caught_up(port: int, group: str, topic: str, partitions: int, tenant: str,
                     at_least: int) -> bool:
    """The worker on `port` mirrored `at_least` feedback events of `tenant` and its group's
    lag on `topic` is 0 on every one of its `partitions`."""
    s = scrape(port)
    if s is None:
        return False
    lag = s.select("streams_consumer_lag", group=group, topic=topic)
    return (len(lag) == partitions and all(v == 0 for _l, v in lag)
            and s.total("streams_mirror_feedback_total", tenant=tenant) >= at_least)


def sink_caught_up(port: int, topic: str, tenant: str, at_least: int) -> bool:
    """The sink on `port` delivered `at_least` scores of `tenant` and its lag on `topic` is 0."""
    s = scrape(port)
    lag = s.select("streams_consumer_lag", topic=topic) if s else []
    return bool(s and lag and all(v == 0 for _l, v in lag)
                and s.total("streams_sink_deliveries_total", tenant=tenant) >= at_least)

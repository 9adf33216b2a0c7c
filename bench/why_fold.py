"""The report's `why` part: `fold_why` over N envelopes in memory, two rules (a filtered
and rate-limited one, a sampled one), CPU time per event per rule. No broker: the report
reads the log first (its own figure, docs/limitations.md); this is what the fold adds.

    .venv/bin/python -m bench.why_fold --envelopes 1000000
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from datetime import timedelta

from streams.core.events import AppEvent, Envelope
from streams.core.rules import F, Rule, on, run
from streams.core.rules.why import fold_why


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--envelopes", type=int, default=1_000_000)
    args = parser.parse_args()
    n = args.envelopes
    log = [Envelope.new(AppEvent(name="ops:error_spike",
                                 data={"service": "api" if i % 2 else "web"}),
                        tenant="acme", workspace="prod") for i in range(n)]
    rules = [Rule(name="t:two", when=on("ops:error_spike").where(F.data.service.eq("api"))
                  .at_most(2, per=timedelta(hours=1)), then=run("a")),
             Rule(name="t:sampled", when=on("ops:error_spike").sample(0.1), then=run("a"))]
    started = time.process_time()
    counts = fold_why(rules, log)
    cpu = time.process_time() - started
    print(json.dumps({"envelopes": n, "rules": len(rules), "fold_why_cpu_s": round(cpu, 2),
                      "cpu_us_per_event_per_rule": round(cpu / n / len(rules) * 1e6, 2),
                      "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
                      "counts": counts}))


if __name__ == "__main__":
    main()

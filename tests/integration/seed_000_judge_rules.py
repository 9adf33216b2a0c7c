"""Seed 000's evaluator as a rule, for a worker: what the seed hands its in-process
`Reactor(workspaces, actions={"triage": triage, judge.name: judge}, deps=deps)`, here as the
RULES, ACTIONS and DEPS a worker loads (`--rules tests.integration.seed_000_rules --rules
THIS`; the first module has `triage`)."""

from __future__ import annotations

from tests.seed_000 import deps, judge, judge_triage

RULES = [judge_triage]
ACTIONS = {judge.name: judge}
DEPS = deps

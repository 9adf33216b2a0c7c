"""`streams worker`: the feedback mirror, and the rules reactor when rules are given."""

from __future__ import annotations

from typing import Annotated

import typer

from streams.surfaces.cli.base import (
    TypesOption,
    check_broker,
    handled,
    load_rules,
    load_types,
    settings,
    with_proposal_outcome,
)

__all__ = ["worker"]


def worker(
    types: TypesOption = None,
    cursor: Annotated[str, typer.Option(help="Consumer group (cursor) name of the mirror.")] = (
        "feedback-mirror"),
    batch_size: Annotated[int | None, typer.Option(
        help="Events per batch. Default: $STREAMS_MIRROR_BATCH_SIZE.")] = None,
    stats_interval: Annotated[float, typer.Option(help="Seconds between stats lines; 0: none.")]
    = 0.0,
    loglevel: Annotated[str, typer.Option(help="crit, error, warn, info or debug.")] = "warn",
    rules: Annotated[list[str] | None, typer.Option(
        "--rules", help="Module with RULES (list of Rule), ACTIONS (name -> action) and "
        "optionally DEPS; repeatable. Default: $STREAMS_RULE_MODULES.")] = None,
    proposal_outcome: Annotated[bool | None, typer.Option(
        "--proposal-outcome/--no-proposal-outcome", help="Also run the shipped "
        "proposal-outcome rule (streams.core.proposals.rule). Default: "
        "$STREAMS_PROPOSAL_OUTCOME.")] = None,
) -> None:
    """Run a worker: the feedback mirror, and the rules reactor when rules are given."""
    # Lazy: Faust is slow to import, and `streams --help` should not pay for it.
    from streams.runtime.root import Runtime
    from streams.runtime.worker.app import Worker

    load_types(types)
    found_rules, actions, deps = load_rules(with_proposal_outcome(rules, proposal_outcome))
    config = settings()
    check_broker(config)
    with handled():
        Worker(Runtime(config), cursor=cursor, batch_size=batch_size,
               stats_interval=stats_interval or None, rules=found_rules, actions=actions,
               deps=deps).run(loglevel=loglevel)

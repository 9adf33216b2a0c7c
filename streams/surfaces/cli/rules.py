"""`streams rules ...`: rules as data. Draft a rule as a proposal (`propose`), resolve it
(`resolve`), install it (`install FILE.json` or `install --from-artifact ID`, optionally
`--backfill`), archive it (`archive NAME`), promote its evaluator's shadow version
(`promote NAME`, `--rollback`), list a tenant's installed rules (`list`), and
ask what a rule did with an event, and why (`why NAME EVENT_ID`).
Each command prints one JSON object on stdout; a failure is one line naming what to fix and
its kind's exit code (streams.surfaces.cli.base.ExitCode: 2 a refusal, 5 an unknown
tenant, 6 a module that cannot be used, 10 the broker cannot be reached).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Annotated, Any

import typer

from streams.surfaces.cli.base import (
    TenantOption,
    TypesOption,
    counted,
    fail,
    load_rules,
    load_types,
    run_for_tenant,
)

__all__ = ["rules_app"]

rules_app = typer.Typer(no_args_is_help=True,
                        help="Rules as data: propose, resolve, install, archive, list; why.")

WorkspaceOption = Annotated[str, typer.Option(
    "--workspace", help="The workspace the facts (proposal, install, archive) are logged in.")]
RulesOption = Annotated[list[str] | None, typer.Option(
    "--rules", help="Rules module whose ACTIONS is the action registry (the workers' "
    "--rules); repeatable. Default: $STREAMS_RULE_MODULES.")]
ByOption = Annotated[str, typer.Option(
    "--by", help="Who does it, as a participant: user:<id>, agent:<id>, system.")]


def _print(data: Any) -> None:
    print(json.dumps(data, indent=2, default=str))


def _read_json(path: Path) -> Any:
    """A file's JSON; a file that is not JSON ends the command (exit 2) naming where."""
    try:
        return json.loads(path.read_text())
    except OSError as exc:
        raise typer.BadParameter(f"cannot read {path}: {exc}") from exc
    except json.JSONDecodeError as exc:
        raise fail(f"{path}: rule JSON is not valid JSON: {exc.msg} at line {exc.lineno} "
                   f"column {exc.colno}", 2) from exc


def _registry(rules: list[str] | None, types: list[str] | None,
              ) -> tuple[list[str], set[str], dict[str, int | None]]:
    """The rules modules' rule names, action names, and the costs the actions declare for
    one evaluation (what a backfill budget claims: a fixed number of tokens, or None for a
    function of the input), importing the types first, so app event types are declared."""
    load_types(types)
    found, actions, _deps = load_rules(rules)
    costs: dict[str, int | None] = {}
    for name, action in actions.items():
        cost = getattr(action, "cost", None)
        if cost is not None:
            costs[name] = cost if isinstance(cost, int) else None
    return [r.name for r in found], set(actions), costs


@rules_app.command("list")
def rules_list(
    tenant: TenantOption,
    all_: Annotated[bool, typer.Option("--all", help="Archived rules too.")] = False,
) -> None:
    """The tenant's installed rules (newest entry per rule), as JSON."""
    from streams.runtime.jobs.rules import Rulebook

    async def main(runtime: Any) -> list[dict[str, Any]]:
        entries = await asyncio.to_thread(Rulebook(runtime).entries, tenant)
        return [{"rule": e.rule, "state": e.state, "action": e.definition["then"]["action"],
                 "on": e.definition["when"]["on"], "workspace": e.workspace,
                 "installed_at": e.installed_at, "installed_by": e.installed_by,
                 "artifact_id": e.artifact_id, "archived_at": e.archived_at,
                 "definition": e.definition}
                for e in sorted(entries.values(), key=lambda e: e.rule)
                if all_ or e.live]

    _print(run_for_tenant(main, tenant))


@rules_app.command("install")
def rules_install(
    tenant: TenantOption,
    workspace: WorkspaceOption,
    file: Annotated[Path | None, typer.Argument(help="The rule's JSON form.")] = None,
    from_artifact: Annotated[str | None, typer.Option(
        "--from-artifact", help="Install the accepted version of this rule draft (an "
        "artifact of kind 'rule' in the workspace) instead of a file.")] = None,
    backfill: Annotated[bool, typer.Option(
        "--backfill", help="Also replay the rule over the tenant's history (events before "
        "the installation point); firings the log has already are not written again.")]
    = False,
    since: Annotated[str | None, typer.Option(
        "--since", help="With --backfill: only firings caused by events at or after this "
        "time (ISO 8601, e.g. 2026-12-01 or 2026-12-01T08:00Z; UTC when no offset).")]
    = None,
    until: Annotated[str | None, typer.Option(
        "--until", help="With --backfill: only firings caused by events before this time.")]
    = None,
    limit: Annotated[int | None, typer.Option(
        "--limit", help="With --backfill: write at most this many firings, in log order; "
        "run the same install again to write the next ones (`left` says how many wait).")]
    = None,
    budget_tokens: Annotated[int | None, typer.Option(
        "--budget-tokens", help="With --backfill: the backfill's runs may claim at most this "
        "many tokens in all (each evaluation its action's cost=), apart from the live runs' "
        "budget; runs past it judge nothing (over_budget). Kept with the rule: a later "
        "backfill spends what is left, or give a new amount.")] = None,
    rules: RulesOption = None,
    types: TypesOption = None,
) -> None:
    """Install a rule for a tenant: live in running workers within seconds, from now on
    (and over the history with --backfill, within --since/--until, --limit firings at a
    time, with a progress bar on stderr). Recorded as rule_installed by the system."""
    from streams.core.errors import StreamsError
    from streams.core.events import Envelope
    from streams.core.proposals import fold_ledger
    from streams.core.rules import InvalidRule
    from streams.runtime.jobs.rules import BackfillScope, Rulebook
    from streams.surfaces.report.model import parse_time

    if (file is None) == (from_artifact is None):
        raise typer.BadParameter("give a rule JSON file or --from-artifact ID (one of them)")
    if not backfill and (since or until or limit is not None or budget_tokens is not None):
        raise typer.BadParameter("--since, --until, --limit and --budget-tokens bound what "
                                 "--backfill writes and spends: add --backfill, or leave "
                                 "them out")
    if budget_tokens is not None and budget_tokens < 1:
        raise typer.BadParameter(f"--budget-tokens must be a whole number of tokens above 0, "
                                 f"got {budget_tokens}")
    try:
        scope = BackfillScope(since=parse_time(since, "--since") if since else None,
                              until=parse_time(until, "--until") if until else None,
                              limit=limit)
    except StreamsError as exc:
        raise fail(exc) from exc
    module_rules, actions, costs = _registry(rules, types)
    definition = _read_json(file) if file is not None else None

    async def main(runtime: Any) -> dict[str, Any]:
        nonlocal definition
        if from_artifact is not None:
            from streams.runtime.client.workspace import StreamsClient

            ws = StreamsClient(runtime).workspace(tenant, workspace)
            envelopes: list[Envelope] = await ws.read()
            definition = accepted_definition(fold_ledger(envelopes), from_artifact)
        # Shown once the firings to write are known, so a refused install prints none.
        with counted("backfilling: firings written") as progress:
            try:
                done = await Rulebook(runtime).install(
                    tenant, workspace, definition, actions=actions, module_rules=module_rules,
                    artifact_id=from_artifact, backfill=backfill, scope=scope,
                    progress=progress, budget_tokens=budget_tokens, costs=costs)
            except InvalidRule as exc:
                where = f"{file}: " if file is not None else f"artifact {from_artifact!r}: "
                raise InvalidRule(where + str(exc)) from exc
        out: dict[str, Any] = {"rule": done.entry.rule, "state": done.entry.state,
                               "repeat": done.repeat, "artifact_id": done.entry.artifact_id,
                               "installed_event_id": done.entry.installed_event_id,
                               "start": done.entry.start}
        if done.backfilled is not None:
            out["backfill"] = {"events": done.backfilled.events,
                               "written": done.backfilled.written,
                               "already": done.backfilled.already,
                               "left": done.backfilled.left,
                               "since": scope.since, "until": scope.until,
                               "limit": scope.limit}
        budget = done.entry.backfill_budget
        if budget is not None:
            out["backfill_budget"] = {"name": budget.name, "tokens": budget.tokens}
        return out

    _print(run_for_tenant(main, tenant))


def accepted_definition(ledger: Any, artifact_id: str) -> Any:
    """The JSON form in the accepted version of a rule draft; InvalidRule saying what is
    missing otherwise."""
    from streams.core.rules import InvalidRule

    artifact = ledger.artifact(artifact_id)
    if artifact is None or not artifact.versions:
        waiting = sorted(p.proposal_id for p in ledger.proposals.values()
                         if p.proposal.artifact_id == artifact_id)
        if waiting:
            raise InvalidRule(f"artifact {artifact_id!r} has no accepted version yet; resolve "
                              f"its proposal (streams rules resolve {waiting[0]} --accept)")
        raise InvalidRule(f"no artifact {artifact_id!r} in this workspace; propose the rule "
                          f"first (streams rules propose FILE)")
    if artifact.kind != "rule":
        raise InvalidRule(f"artifact {artifact_id!r} is a {artifact.kind!r}, not a rule")
    if artifact.archived_at is not None:
        raise InvalidRule(f"artifact {artifact_id!r} is archived; propose the rule again")
    text = artifact.content.get("definition")
    if text is None:
        raise InvalidRule(f"artifact {artifact_id!r} has no 'definition' field, so holds no "
                          f"rule JSON; drafts made by `streams rules propose` have one")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidRule(f"artifact {artifact_id!r}: its definition is not valid JSON: "
                          f"{exc.msg} at line {exc.lineno} column {exc.colno}") from exc


@rules_app.command("archive")
def rules_archive(
    name: Annotated[str, typer.Argument(help="The installed rule's name.")],
    tenant: TenantOption,
    workspace: WorkspaceOption,
) -> None:
    """Archive an installed rule: running workers stop matching it within seconds.
    Recorded as rule_archived by the system."""
    from streams.runtime.jobs.rules import Rulebook

    async def main(runtime: Any) -> dict[str, Any]:
        entry = await Rulebook(runtime).archive(tenant, workspace, name)
        return {"rule": entry.rule, "state": entry.state,
                "archived_event_id": entry.archived_event_id}

    _print(run_for_tenant(main, tenant))


@rules_app.command("promote")
def rules_promote(
    name: Annotated[str, typer.Argument(help="The installed rule's name.")],
    tenant: TenantOption,
    rollback: Annotated[bool, typer.Option(
        "--rollback", help="Point the rule back at the action it promoted from (the "
        "earlier version judges again).")] = False,
    rules: RulesOption = None,
    types: TypesOption = None,
) -> None:
    """Promote the shadow version of an installed rule's evaluator action: from now on the
    new version judges and gives feedback, reusing the verdicts it recorded as a shadow
    (the rule is pointed at `<action>@<version>`; running workers switch within seconds).
    Recorded as rule_installed by the system, the installation point kept."""
    from streams.core.evaluation import EvaluatorAction, promoted_name
    from streams.core.rules import InvalidRule
    from streams.runtime.jobs.rules import Rulebook

    load_types(types)
    _found, actions, _deps = load_rules(rules)

    def target_of(current: str) -> str:
        base, promoted, version = current.partition("@")
        if rollback:
            if not promoted:
                raise InvalidRule(f"rule {name!r} runs {current!r}, no promoted version: "
                                  "nothing to roll back")
            return base
        if promoted:
            raise InvalidRule(f"rule {name!r} runs {current!r}, already promoted to version "
                              f"{version}; roll it back first (--rollback)")
        action = actions.get(current)
        if not isinstance(action, EvaluatorAction) or action.shadow is None:
            raise InvalidRule(f"rule {name!r} runs action {current!r}, which has no shadow "
                              "version to promote: give its EvaluatorAction a shadow= "
                              "evaluator in the --rules module")
        return promoted_name(current, action.shadow.version)

    async def main(runtime: Any) -> dict[str, Any]:
        rulebook = Rulebook(runtime)
        entries = await asyncio.to_thread(rulebook.entries, tenant)
        entry = entries.get(name)
        current = str(entry.definition["then"]["action"]) if entry is not None else ""
        # switch_action refuses a rule that is not live, naming the live ones.
        wanted = target_of(current) if entry is not None and entry.live else current
        done, before = await rulebook.switch_action(tenant, name, wanted, actions=set(actions))
        action = actions.get(wanted)
        evaluator = getattr(action, "evaluator", None)
        return {"rule": name, "from": before, "to": wanted,
                "evaluator": f"{evaluator.name}@{evaluator.version}" if evaluator else None,
                "installed_event_id": done.installed_event_id, "start": done.start}

    _print(run_for_tenant(main, tenant))


@rules_app.command("why")
def rules_why(
    name: Annotated[str, typer.Argument(help="The rule's name.")],
    event_id: Annotated[str, typer.Argument(help="The event's id (evt_...).")],
    tenant: TenantOption,
    workspace: Annotated[str, typer.Option("--workspace", help="The event's workspace.")],
    rules: RulesOption = None,
    types: TypesOption = None,
) -> None:
    """What a rule did with one event, and why, as JSON: `outcome` is not_watched,
    filtered_out, sampled_out, counting, throttled, undecided, judged (its run succeeded),
    handed_off, over_budget, running, retrying or dead_lettered; `detail` says why. The
    rule is looked up in the --rules modules, then among the tenant's installed rules."""
    from streams.core.errors import NotFound
    from streams.runtime.client.workspace import StreamsClient
    from streams.runtime.jobs.rules import RuleFinder

    load_types(types)
    found, _actions, _deps = load_rules(rules)

    async def main(runtime: Any) -> dict[str, Any]:
        rule = await asyncio.to_thread(RuleFinder(runtime, found).find, tenant, name)
        if rule is None:
            raise NotFound(f"no rule {name!r} in the --rules modules nor installed for "
                           f"tenant {tenant!r} (streams rules list --tenant {tenant})")
        ws = StreamsClient(runtime).workspace(tenant, workspace)
        return (await ws.why(rule, event_id)).as_dict()

    _print(run_for_tenant(main, tenant))


@rules_app.command("propose")
def rules_propose(
    file: Annotated[Path, typer.Argument(help="The drafted rule's JSON form.")],
    tenant: TenantOption,
    workspace: WorkspaceOption,
    by: ByOption,
    artifact: Annotated[str | None, typer.Option(
        help="The draft's artifact id (default: rule:<name>).")] = None,
    rules: RulesOption = None,
    types: TypesOption = None,
) -> None:
    """Draft a rule: propose an artifact of kind 'rule' holding its JSON (checked first, as
    an install would check it), for a person to resolve."""
    from streams.core.actors import actor_from_participant
    from streams.core.events import Change, ProposalMade
    from streams.core.rules import rule_from_dict

    _module_rules, actions, _costs = _registry(rules, types)
    definition = _read_json(file)

    async def main(runtime: Any) -> dict[str, Any]:
        rule = rule_from_dict(definition, actions=actions)
        artifact_id = artifact or f"rule:{rule.name}"
        proposal_id = f"proposal:{uuid.uuid4().hex}"
        from streams.runtime.client.workspace import StreamsClient

        ws = StreamsClient(runtime).workspace(tenant, workspace, actor=actor_from_participant(by))
        text = json.dumps(definition, indent=2, sort_keys=True)
        recorded = await ws.append(ProposalMade(
            proposal_id=proposal_id, artifact_id=artifact_id, kind="rule",
            change=Change(set={"definition": text})))
        return {"proposal_id": proposal_id, "artifact_id": artifact_id, "rule": rule.name,
                "event_id": recorded.id}

    _print(run_for_tenant(main, tenant))


@rules_app.command("resolve")
def rules_resolve(
    proposal: Annotated[str, typer.Argument(help="The proposal's id.")],
    tenant: TenantOption,
    workspace: WorkspaceOption,
    by: ByOption,
    accept: Annotated[bool, typer.Option("--accept/--reject",
                                         help="Accept or reject the draft.")] = True,
) -> None:
    """Accept or reject a rule draft's proposal, as a person."""
    from streams.core.actors import actor_from_participant
    from streams.core.events import ProposalResolved

    async def main(runtime: Any) -> dict[str, Any]:
        from streams.runtime.client.workspace import StreamsClient

        ws = StreamsClient(runtime).workspace(tenant, workspace, actor=actor_from_participant(by))
        resolution = "accepted" if accept else "rejected"
        recorded = await ws.append(ProposalResolved(proposal_id=proposal,
                                                    resolution=resolution))
        return {"proposal_id": proposal, "resolution": resolution, "event_id": recorded.id}

    _print(run_for_tenant(main, tenant))

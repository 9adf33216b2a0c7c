"""What every `streams` command shares: the settings, the console, loading the user's
feedback-type and rules modules, the exit codes and the one-line error of each kind.

Command modules import this module only (never `streams.surfaces.cli.app`, which imports
them): that keeps the command line free of import cycles.

Every failure a user can cause or meet ends the command with ONE line on stderr, saying what
failed and what to do, and an exit code of its kind (`ExitCode`, tabled in docs/cli.md).
"""

from __future__ import annotations

import asyncio
import difflib
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from enum import IntEnum
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from streams.core.errors import (
    ConfigError,
    KafkaUnavailable,
    MissingExtra,
    NotFound,
    StreamsError,
    ValidationFailed,
)
from streams.core.tenancy import check_tenant
from streams.settings import Settings
from streams.surfaces.modules import ModuleFailed, import_user_module

if TYPE_CHECKING:
    from streams.runtime.root import Runtime

__all__ = [
    "PROPOSAL_OUTCOME_MODULE",
    "BrokerUnreachable",
    "ExitCode",
    "LangfuseUnreachable",
    "ModuleFailed",
    "RegistryUnreachable",
    "TenantOption",
    "TypesOption",
    "check_broker",
    "console",
    "exit_code_of",
    "fail",
    "handled",
    "import_user_module",
    "is_transport_error",
    "load_rules",
    "load_types",
    "no_such_tenant",
    "require_broker",
    "require_tenant",
    "run_for_tenant",
    "settings",
    "with_proposal_outcome",
]

console = Console(stderr=True)


@contextmanager
def counted(what: str) -> Iterator[Callable[[int, int], None]]:
    """A progress bar on stderr, `what` and done of total, that the yielded callback
    `progress(done, total)` moves; shown from its first call, so a command refused before
    any work prints none."""
    # Lazy: rich's progress module is only needed by the commands that show one.
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    with Progress("[progress.description]{task.description}", BarColumn(),
                  MofNCompleteColumn(), TimeElapsedColumn(), console=console,
                  transient=False) as bar:
        task = bar.add_task(what, total=None, visible=False)

        def progress(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total, visible=True)

        yield progress
"""Messages and progress: stderr, so stdout carries only a command's result (JSON, tokens)."""


class ExitCode(IntEnum):
    """The exit code of each kind of failure (docs/cli.md tables them)."""

    OK = 0
    FAILED = 1
    """The command ran and its answer is "no": a schema drifted, the registry refused an
    incompatible schema, the demo's scores did not all arrive."""
    USAGE = 2
    """A bad option, argument or input (click's own code for usage errors)."""
    NOTHING_MATCHES = 3
    """`deadletters`: nothing matches the filters."""
    NOT_ALL_REDRIVEN = 4
    """`deadletters redrive`: some selected letters were not re-driven."""
    NOT_FOUND = 5
    """A named tenant, key, rule or artifact does not exist."""
    MODULE_FAILED = 6
    """A `--types` or `--rules` module cannot be imported (missing, a syntax error, a
    misspelled name inside it) or holds unusable rules."""
    BROKER_UNREACHABLE = 10
    """The Kafka broker did not answer: check KAFKA_BOOTSTRAP_SERVERS, or start the stack."""
    REGISTRY_UNREACHABLE = 11
    """The schema registry did not answer: check SCHEMA_REGISTRY_URL."""
    LANGFUSE_UNREACHABLE = 12
    """Langfuse did not answer: check LANGFUSE_HOST."""
    MISSING_EXTRA = 69
    """A command's optional libraries are not installed (EX_UNAVAILABLE): the line names the
    extra to install."""
    OUTAGE_TOO_LONG = 75
    """A running sink's backend stayed down too long (EX_TEMPFAIL: start it again later)."""
    CONFIG = 78
    """A setting (an environment variable) has a bad value (EX_CONFIG)."""


class BrokerUnreachable(KafkaUnavailable):
    """No broker of KAFKA_BOOTSTRAP_SERVERS answered."""


class RegistryUnreachable(KafkaUnavailable):
    """The schema registry at SCHEMA_REGISTRY_URL did not answer."""


class LangfuseUnreachable(StreamsError):
    """Langfuse at LANGFUSE_HOST did not answer."""


def is_transport_error(exc: BaseException) -> bool:
    """Whether an HTTP client could not reach its server: an httpx TransportError (or the
    same class of httpx2, which confluent-kafka's registry client may use instead), or an
    OSError. The registry client and the Langfuse SDK raise these unwrapped."""
    if isinstance(exc, OSError):
        return True
    return any(kind.__name__ == "TransportError" and kind.__module__.startswith("httpx")
               for kind in type(exc).__mro__)


def exit_code_of(exc: BaseException) -> ExitCode:
    """The exit code of an error the project raises (most specific kind first)."""
    kinds: list[tuple[type[BaseException], ExitCode]] = [
        (MissingExtra, ExitCode.MISSING_EXTRA),
        (ConfigError, ExitCode.CONFIG),
        (ModuleFailed, ExitCode.MODULE_FAILED),
        (NotFound, ExitCode.NOT_FOUND),
        (BrokerUnreachable, ExitCode.BROKER_UNREACHABLE),
        (RegistryUnreachable, ExitCode.REGISTRY_UNREACHABLE),
        (LangfuseUnreachable, ExitCode.LANGFUSE_UNREACHABLE),
        (KafkaUnavailable, ExitCode.BROKER_UNREACHABLE),
        (ValidationFailed, ExitCode.USAGE),
    ]
    for kind, code in kinds:
        if isinstance(exc, kind):
            return code
    return ExitCode.USAGE


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _configured(variable: str) -> str:
    """The value a setting has here, for a hint (empty if the settings do not load)."""
    try:
        shown = Settings.from_env().shown()
    except ConfigError:
        return ""
    return f" ({shown[variable]})" if shown.get(variable) else ""


def _unreachable(exc: KafkaUnavailable) -> tuple[str, ExitCode]:
    """An unavailable broker or registry's message, with what to check, and its code."""
    message = str(exc)
    if isinstance(exc, RegistryUnreachable) or (
            not isinstance(exc, BrokerUnreachable) and "registry" in message.lower()):
        hint = (f"check SCHEMA_REGISTRY_URL{_configured('SCHEMA_REGISTRY_URL')} and that the "
                "registry is up, or start the stack (deploy/stack.sh start)")
        code = ExitCode.REGISTRY_UNREACHABLE
    else:
        hint = (f"check KAFKA_BOOTSTRAP_SERVERS{_configured('KAFKA_BOOTSTRAP_SERVERS')} and "
                "that the broker is up, or start the stack (deploy/stack.sh start)")
        code = ExitCode.BROKER_UNREACHABLE
    if "deploy/stack.sh" not in message:
        message = f"{message.rstrip('.; ')}; {hint}"
    return message, code


def fail(error: BaseException | str, code: int | None = None) -> typer.Exit:
    """Print one error line (brackets kept, never wrapped) and give the exit to raise; the
    code is the error's kind's (`exit_code_of`) unless given. An unavailable broker or
    registry's line says which setting to check and how to start the stack."""
    message = error if isinstance(error, str) else str(error)
    if isinstance(error, KafkaUnavailable):
        message, kind = _unreachable(error)
        code = kind if code is None else code
    if code is None:
        code = exit_code_of(error) if isinstance(error, BaseException) else ExitCode.FAILED
    prefix = "configuration error" if code == ExitCode.CONFIG else "error"
    console.print(f"[red]{prefix}:[/red] {escape(_one_line(message))}", soft_wrap=True)
    return typer.Exit(int(code))


@contextmanager
def handled(default: int | None = None) -> Iterator[None]:
    """Turn the project's errors raised inside into one line and their kind's exit code
    (`default` for kinds without their own: a refusal by default)."""
    try:
        yield
    except StreamsError as exc:
        own = default is not None and exit_code_of(exc) == ExitCode.USAGE
        raise fail(exc, default if own else None) from exc


def settings() -> Settings:
    """The settings from the environment; a bad value ends the command (ExitCode.CONFIG) with
    the message naming the variable."""
    try:
        return Settings.from_env()
    except ConfigError as exc:
        raise fail(exc) from exc


TypesOption = Annotated[
    list[str] | None,
    typer.Option("--types", help="Module that defines feedback types; repeatable. "
                 "Default: $STREAMS_FEEDBACK_MODULES (comma separated)."),
]


def load_types(modules: list[str] | None) -> list[str]:
    """Import the modules that define feedback types, so they register; returns their names."""
    names = list(modules or settings().feedback_modules)
    with handled():
        for name in names:
            import_user_module("feedback", name, "--types")
    return names


PROPOSAL_OUTCOME_MODULE = "streams.core.proposals.rule"


def with_proposal_outcome(modules: list[str] | None, enabled: bool | None) -> list[str]:
    """The worker's rules modules (`--rules`, else $STREAMS_RULE_MODULES), with the shipped
    proposal-outcome rule's module added when enabled (`--proposal-outcome`, else
    $STREAMS_PROPOSAL_OUTCOME=on) and not named already."""
    names = list(modules or settings().rule_modules)
    if enabled is None:
        enabled = settings().proposal_outcome == "on"
    if enabled and PROPOSAL_OUTCOME_MODULE not in names:
        names.append(PROPOSAL_OUTCOME_MODULE)
    return names


def load_rules(modules: list[str] | None) -> tuple[list[Any], dict[str, Any], dict[str, Any]]:
    """Rules, actions and deps from modules exposing RULES, ACTIONS and DEPS; the actions
    with each evaluator action's promoted form (`<name>@<shadow version>`, see
    streams.core.evaluation.with_promotions)."""
    from streams.core.evaluation import with_promotions
    from streams.core.rules import RuleSet

    names = list(modules or settings().rule_modules)
    rules: list[Any] = []
    actions: dict[str, Any] = {}
    deps: dict[str, Any] = {}
    for name in names:
        with handled():
            module = import_user_module("rules", name, "--rules")
        rules += list(getattr(module, "RULES", []))
        actions.update(getattr(module, "ACTIONS", {}))
        deps.update(getattr(module, "DEPS", {}))
    try:
        # The worker checks this too; here the operator gets the reason, not a traceback.
        RuleSet(rules).check_event_types()
    except ValidationFailed as exc:
        raise fail(ModuleFailed(f"rules in {', '.join(names)}: {exc}")) from exc
    return rules, with_promotions(actions), deps


def no_such_tenant(tenant: str, tenants: list[str], prefix: str) -> NoReturn:
    """Raise NotFound for a tenant the broker does not have, naming the close names (a typo)
    or the existing tenants."""
    close = difflib.get_close_matches(tenant, tenants, n=3, cutoff=0.6)
    if close:
        hint = f"did you mean {' or '.join(close)}?"
    elif tenants:
        shown = ", ".join(tenants[:10]) + (", ..." if len(tenants) > 10 else "")
        hint = f"the tenants are {shown}"
    else:
        hint = f"there are no tenants under prefix {prefix!r}"
    raise NotFound(f"no tenant {tenant} under prefix {prefix!r}: {hint} (`streams tenant "
                   f"create {tenant}` creates it; check STREAMS_TOPIC_PREFIX)")


def require_tenant(runtime: Runtime, tenant: str) -> None:
    """ValidationFailed for a bad tenant name, NotFound (naming the close names) for a
    tenant the broker does not have: a key or rule for a misspelled tenant would act on
    nothing, silently."""
    check_tenant(tenant)
    tenants = runtime.admin.tenants()
    if tenant not in tenants:
        no_such_tenant(tenant, tenants, runtime.settings.topic_prefix)


def require_broker(runtime: Runtime) -> None:
    """BrokerUnreachable, within STREAMS_ADMIN_TIMEOUT, when no broker answers: a worker or
    sink would otherwise wait for one, retrying, and say nothing useful."""
    # Lazy: confluent-kafka is loaded by the commands that talk to the broker only.
    from confluent_kafka import KafkaException

    try:
        runtime.admin.client.list_topics(timeout=runtime.settings.admin_timeout)
    except KafkaException as exc:
        raise BrokerUnreachable(
            f"no Kafka broker answered at {runtime.settings.bootstrap_servers} within "
            f"{runtime.settings.admin_timeout:g} s ({exc.args[0].str() if exc.args else exc})"
        ) from exc


def check_broker(config: Settings) -> None:
    """`require_broker` on a Runtime of its own, closed after: the preflight of the
    long-running commands (worker, sinks), ending the command with one line if it fails."""
    # Lazy: the composition root loads the Kafka clients, which `--help` does not need.
    from streams.runtime.root import Runtime

    runtime = Runtime(config)
    try:
        with handled():
            require_broker(runtime)
    finally:
        runtime.close()


_T = TypeVar("_T")

TenantOption = Annotated[str, typer.Option("--tenant", help="The tenant.")]


def run_for_tenant(make: Callable[[Any], Coroutine[Any, Any, _T]], tenant: str) -> _T:
    """Run `make(runtime)` on a Runtime from the environment, once `tenant` is known to
    exist (a definition for a misspelled tenant would act on nothing, silently); project
    errors become a message and an exit code."""
    # Lazy: the composition root loads the Kafka clients, which `--help` does not need.
    from streams.runtime.root import Runtime

    runtime = Runtime(settings())
    try:
        with handled():
            require_tenant(runtime, tenant)
            return asyncio.run(make(runtime))
    finally:
        runtime.close()

"""`streams tenant ...`: tenants' topics, and on a secured cluster their principals and ACLs.

    streams tenant create acme [--partitions 6] [--password-file pw] [--principal/--no-principal]
    streams tenant list
    streams tenant rotate-password acme [--password-file pw]
    streams tenant delete acme
    streams tenant service-acls streams-worker

Run them as a super user (e.g. the stack's `admin`). A generated password is printed once, on
stdout, as a JSON line; nothing stores it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from streams.core.errors import StreamsError
from streams.surfaces.cli.base import console, fail, settings

__all__ = ["tenant_app"]

tenant_app = typer.Typer(no_args_is_help=True,
                         help="Create, list and delete tenants, their principals and ACLs.")

PasswordFileOption = Annotated[Path | None, typer.Option(
    "--password-file", help="File whose first line is the password; default: a random one, "
    "printed once.")]


def _password(path: Path | None) -> tuple[str, bool]:
    """The password from `path`, or a generated one; and whether it was generated."""
    from streams.adapters.kafka.access import new_password

    if path is None:
        return new_password(), True
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise typer.BadParameter(f"cannot read --password-file {path}: {exc}") from exc
    if not lines or not lines[0]:
        raise typer.BadParameter(f"--password-file {path} is empty: write the password in it")
    return lines[0], False


@tenant_app.command("create")
def tenant_create(
    names: Annotated[list[str], typer.Argument(help="Tenant names.")],
    partitions: Annotated[int | None, typer.Option(help="Partitions per topic.")] = None,
    principal: Annotated[bool | None, typer.Option(
        "--principal/--no-principal", help="Also create the tenant's SCRAM user and its ACLs. "
        "Default: yes when KAFKA_SECURITY_PROTOCOL is SASL_*.")] = None,
    password_file: PasswordFileOption = None,
) -> None:
    """Create tenants' topics (idempotent), and on a secured cluster each tenant's SCRAM user
    `<prefix>.<tenant>` with ACLs on its own topics and groups only."""
    from streams.core.access import tenant_principal
    from streams.runtime.root import Runtime

    config = settings()
    runtime = Runtime(config)  # every client comes from the composition root
    with_principal = config.security_protocol.startswith("SASL_") if principal is None \
        else principal
    if password_file is not None and len(names) > 1:
        raise typer.BadParameter("--password-file sets one tenant's password: create one "
                                 "tenant per call")
    admin = runtime.admin
    for name in names:
        try:
            if with_principal:
                tenant_principal(name, config.topic_prefix)  # refused before any topic
            info = admin.create_tenant(name, partitions)
        except StreamsError as exc:
            raise fail(exc) from exc
        console.print(f"tenant [bold]{name}[/bold]: " + ", ".join(
            f"{t} ({n} partitions)" for t, n in info.partitions.items()))
        if not with_principal:
            continue
        password, generated = _password(password_file)
        try:
            made = runtime.access.create_principal(name, password)
        except StreamsError as exc:
            raise fail(exc) from exc
        console.print(f"principal User:{made.user}: " + "; ".join(
            f"{g.resource} {g.prefix}* {','.join(g.operations)}" for g in made.grants))
        print(json.dumps({"tenant": name, "user": made.user,
                          **({"password": password} if generated else {})}), flush=True)


@tenant_app.command("list")
def tenant_list() -> None:
    """List tenants (those whose events topic exists)."""
    from streams.runtime.root import Runtime

    try:
        names = Runtime(settings()).admin.tenants()
    except StreamsError as exc:
        raise fail(exc) from exc
    for name in names:
        print(name)


@tenant_app.command("rotate-password")
def tenant_rotate_password(
    name: Annotated[str, typer.Argument(help="Tenant name.")],
    password_file: PasswordFileOption = None,
) -> None:
    """Give the tenant's principal a new password. Connections already open stay up; new ones
    need the new password; workers (the service principal) are not affected."""
    from streams.runtime.root import Runtime

    config = settings()
    runtime = Runtime(config)  # every client comes from the composition root
    password, generated = _password(password_file)
    try:
        access = runtime.access
        if not access.has_principal(name):
            raise typer.BadParameter(f"tenant {name!r} has no principal: create it with "
                                     f"`streams tenant create {name} --principal`")
        user = access.set_password(name, password)
    except StreamsError as exc:
        raise fail(exc) from exc
    console.print(f"new password set for User:{user}")
    print(json.dumps({"tenant": name, "user": user,
                      **({"password": password} if generated else {})}), flush=True)


@tenant_app.command("delete")
def tenant_delete(
    names: Annotated[list[str], typer.Argument(help="Tenant names.")],
    principal: Annotated[bool, typer.Option(
        "--principal/--no-principal", help="Also remove the tenant's user and ACLs.")] = True,
) -> None:
    """Delete tenants: their topics (and records), their SCRAM user and its ACLs."""
    from streams.runtime.root import Runtime

    config = settings()
    runtime = Runtime(config)  # every client comes from the composition root
    for name in names:
        try:
            runtime.admin.delete_tenant(name)
            if principal:
                runtime.access.delete_principal(name)
        except StreamsError as exc:
            raise fail(exc) from exc
        console.print(f"deleted tenant [bold]{name}[/bold]"
                      + (" and its principal" if principal else ""))


@tenant_app.command("service-acls")
def tenant_service_acls(
    user: Annotated[str, typer.Argument(help="The service's SCRAM user (workers, sinks).")],
    password_file: Annotated[Path | None, typer.Option(
        "--password-file", help="Also create or reset the user with this password.")] = None,
) -> None:
    """Grant the service principal what workers and sinks need across every tenant of this
    prefix (see docs/security.md); idempotent."""
    from streams.runtime.root import Runtime

    config = settings()
    runtime = Runtime(config)  # every client comes from the composition root
    try:
        access = runtime.access
        if password_file is not None:
            access.set_user_password(user, _password(password_file)[0])
        grants = access.grant_service(user)
    except StreamsError as exc:
        raise fail(exc) from exc
    for grant in grants:
        print(f"{grant.principal}\t{grant.resource}\t{grant.prefix}*\t{','.join(grant.operations)}")

"""`streams keys create | list | revoke`: API keys for `streams serve`.

Keys are stored as hashes in `<prefix>._keys`; the token is printed once, on stdout, by
`create` (everything else goes to stderr), so `TOKEN=$(streams keys create ...)` works.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated

import typer

from streams.core.actors import AgentActor, AnyActor, EvaluatorActor, UserActor
from streams.surfaces.cli.base import console, handled, require_tenant, settings

if TYPE_CHECKING:
    from streams.runtime.client.keys import KeyStore

__all__ = ["keys_app"]

keys_app = typer.Typer(no_args_is_help=True,
                       help="Create, list and revoke API keys for `streams serve`.")


def _actor(user: str | None, evaluator: str | None, agent: str | None) -> AnyActor:
    given = [x for x in (user, evaluator, agent) if x]
    if len(given) != 1:
        raise typer.BadParameter("give exactly one of --user ID, --evaluator NAME@VERSION, "
                                 "--agent ID")
    if user:
        return UserActor(id=user)
    if agent:
        return AgentActor(id=agent)
    assert evaluator is not None
    name, at, version = evaluator.partition("@")
    if not at or not version:
        raise typer.BadParameter("--evaluator takes NAME@VERSION, e.g. triage-judge@2026-09-28")
    return EvaluatorActor(name=name, version=version)


def _store() -> KeyStore:
    from streams.runtime.client.keys import KeyStore
    from streams.runtime.root import Runtime

    store = KeyStore(Runtime(settings()))
    store.start()
    return store


def _require_tenant(tenant: str) -> None:
    """The tenant exists (`require_tenant`), checked before a key is made for it."""
    # Lazy: the composition root loads the Kafka clients, which `keys --help` does not need.
    from streams.runtime.root import Runtime

    runtime = Runtime(settings())
    try:
        require_tenant(runtime, tenant)
    finally:
        runtime.close()


@keys_app.command("create")
def create(
    tenant: Annotated[str, typer.Option(help="The tenant the key may act in.")],
    user: Annotated[str | None, typer.Option(help="Act as this person.")] = None,
    evaluator: Annotated[str | None, typer.Option(help="Act as this evaluator: NAME@VERSION.")]
    = None,
    agent: Annotated[str | None, typer.Option(help="Act as this agent.")] = None,
    can: Annotated[list[str] | None, typer.Option(
        "--can", help="Capability: give_feedback, read or manage_queues; repeatable. "
        "Default: give_feedback and read.")] = None,
    note: Annotated[str, typer.Option(help="A note shown by `keys list`.")] = "",
) -> None:
    """Create a key bound to a tenant and an actor; prints its token once, on stdout."""
    actor = _actor(user, evaluator, agent)
    with handled():
        _require_tenant(tenant)
        store = _store()
        try:
            key, token = store.create(tenant, actor, set(can or ["give_feedback", "read"]),
                                      note)
        finally:
            store.close()
    console.print(f"key {key.key_id} for {key.actor.participant} in tenant {key.tenant} "
                  f"({', '.join(sorted(key.capabilities))}); the token is shown only now:")
    print(token)


@keys_app.command("list")
def list_keys(
    tenant: Annotated[str | None, typer.Option(help="Only this tenant's keys.")] = None,
) -> None:
    """List keys (never their secrets) as JSON lines."""
    with handled():
        if tenant is not None:
            _require_tenant(tenant)
        store = _store()
    try:
        for key in store.list(tenant):
            print(json.dumps({"key_id": key.key_id, "tenant": key.tenant,
                              "actor": key.actor.participant,
                              "capabilities": sorted(key.capabilities),
                              "created_ms": key.created_ms, "revoked_ms": key.revoked_ms,
                              "note": key.note}))
    finally:
        store.close()


@keys_app.command("revoke")
def revoke(key_id: Annotated[str, typer.Argument(help="The key id (`keys list`).")]) -> None:
    """Revoke a key: every server refuses it within 10 s."""
    with handled():
        store = _store()
        try:
            key = store.revoke(key_id)
        finally:
            store.close()
    console.print(f"revoked {key.key_id} ({key.actor.participant}, tenant {key.tenant})")

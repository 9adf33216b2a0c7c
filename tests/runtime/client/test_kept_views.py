"""Which look-ups read a tenant's read view: only where the machine keeps one (this process
has it open, or its file is in the state directory), and never for a worker's client
(`read_views=False`); the answers themselves are compared with the index's on the real
broker (tests/integration/test_views.py, tests/integration/test_rules_reactor.py)."""

from __future__ import annotations

from pathlib import Path

from streams.runtime.client.views import view_path
from streams.runtime.client.workspace import StreamsClient
from streams.runtime.root import Runtime
from streams.settings import Settings


def test_a_view_is_read_only_where_the_machine_keeps_one(tmp_path: Path) -> None:
    settings = Settings(state_dir=str(tmp_path))
    client = StreamsClient(Runtime(settings))
    assert client.tenant_view_if_kept("acme") is None  # never built for a look-up
    assert not view_path(settings, "acme").exists()
    view_path(settings, "acme").parent.mkdir(parents=True)
    view_path(settings, "acme").touch()  # a server's, or `streams views build`'s
    kept = client.tenant_view_if_kept("acme")
    assert kept is not None and kept is client.tenant_view("acme")
    assert client.tenant_view_if_kept("beta") is None
    client.tenant_view("beta")  # opened by this process (runs(), say): kept
    assert client.tenant_view_if_kept("beta") is client.tenant_view("beta")


def test_a_workers_client_never_reads_a_view(tmp_path: Path) -> None:
    settings = Settings(state_dir=str(tmp_path))
    view_path(settings, "acme").parent.mkdir(parents=True)
    view_path(settings, "acme").touch()
    worker = StreamsClient(Runtime(settings), read_views=False)
    assert worker.tenant_view_if_kept("acme") is None

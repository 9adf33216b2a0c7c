"""Which look-ups read a tenant's read view: only where the machine keeps one (this process
has it open, or its file is in the state directory), and never for a worker's client
(`read_views=False`); what a view decodes is kept for reads that return it again. The
answers themselves are compared with the index's on the real broker
(tests/integration/test_views.py, tests/integration/test_rules_reactor.py)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from streams.adapters.avro.codec import envelope_to_record
from streams.adapters.views import RawEvent
from streams.core.actors import UserActor
from streams.core.events import AppEvent, Envelope
from streams.core.viewrows import rows_of
from streams.runtime.client.views import TenantView, view_path
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


class _Codec:
    """Decodes the raw values it was given records for, counting its calls."""

    def __init__(self, records: dict[bytes, dict[str, Any]]) -> None:
        self.records = records
        self.calls = 0

    def decode(self, raw: bytes) -> tuple[None, dict[str, Any]]:
        self.calls += 1
        return None, self.records[raw]


def test_a_view_decodes_an_event_once_and_never_returns_a_stale_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    events = {f"raw{n}".encode(): envelope_to_record(Envelope.new(
        AppEvent(name="ops:x", data={"n": n}), tenant="acme", workspace="prod",
        actor=UserActor(id="ada"))) for n in range(4)}
    codec = _Codec(events)
    runtime = SimpleNamespace(settings=Settings(state_dir=str(tmp_path)), codec=codec)
    view = TenantView(cast(Runtime, runtime), "acme")
    first = view._envelope(RawEvent(0, 7, 1, b"raw0"))
    assert view._envelope(RawEvent(0, 7, 1, b"raw0")) is first  # read again: not decoded
    assert codec.calls == 1 and first.seq is not None and first.seq.offset == 7
    # The same place with other bytes (a file rebuilt after its topic was made again).
    other = view._envelope(RawEvent(0, 7, 1, b"raw1"))
    assert other.event_id != first.event_id and codec.calls == 2
    monkeypatch.setattr("streams.runtime.client.views.DECODED_KEPT", 8)  # two of 4 bytes
    view._envelope(RawEvent(0, 8, 1, b"raw2"))
    view._envelope(RawEvent(0, 9, 1, b"raw3"))
    assert len(view._decoded) == 2 and view._decoded_bytes == 8  # the oldest went first
    view._envelope(RawEvent(0, 7, 1, b"raw0"))
    assert codec.calls == 5
    # A record larger than DECODED_LARGEST is decoded every time, never kept.
    monkeypatch.setattr("streams.runtime.client.views.DECODED_LARGEST", 3)
    view._envelope(RawEvent(0, 10, 1, b"raw1"))
    view._envelope(RawEvent(0, 10, 1, b"raw1"))
    assert codec.calls == 7 and (0, 10, b"raw1") not in view._decoded


def test_a_chain_read_from_the_view_keeps_only_the_chain_asked_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Two chains whose keys collide (forced): the store returns both, the view keeps one.
    monkeypatch.setattr("streams.adapters.views.chain_key", lambda _cid: 7)
    a = Envelope.new(AppEvent(name="ops:x"), tenant="acme", workspace="prod",
                     actor=UserActor(id="ada"))
    b = Envelope.new(AppEvent(name="ops:x"), tenant="acme", workspace="prod",
                     actor=UserActor(id="ada"))
    a2 = Envelope.new(AppEvent(name="ops:y"), tenant="acme", workspace="prod",
                      actor=UserActor(id="ada"), correlation_id=a.event_id)
    records = {f"raw{n}".encode(): envelope_to_record(e) for n, e in enumerate((a, b, a2))}
    runtime = SimpleNamespace(settings=Settings(state_dir=str(tmp_path)),
                              codec=_Codec(records))
    view = TenantView(cast(Runtime, runtime), "acme")
    view.store.open()
    view.store.apply([rows_of(records[raw], 0, n, raw) for n, raw in enumerate(records)],
                     [], {0: 3})
    assert len(view.store.chain("prod", a.event_id)) == 3
    assert [e.event_id for e in view.chain_events("prod", a.event_id)] == [a.event_id,
                                                                           a2.event_id]
    assert [e.event_id for e in view.chain_events("prod", b.event_id)] == [b.event_id]
    view.close()

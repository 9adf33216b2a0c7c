"""give_feedback with the schema registry stopped: one typed error, after its own timeout.

On a stack of this module's own (deploy/stack.sh on free ports, see test_stack.py), whose
registry is stopped by pid through the script: the shared stack's registry is never touched.
"""

from __future__ import annotations

import pytest

from streams.adapters.avro.fast import RegistryUnavailable
from streams.adapters.kafka.admin import TenantAdmin
from streams.core.actors import UserActor
from streams.core.errors import KafkaUnavailable
from streams.core.events import AppEvent, RunStarted
from streams.core.targets import RunTarget
from streams.examples.ops import TriageQuality
from streams.runtime.client.workspace import StreamsClient
from streams.runtime.root import Runtime
from streams.settings import Settings
from tests.conftest import unique
from tests.deploy.test_stack import OwnStack, own_stack

__all__ = ["own_stack"]  # the fixture, shared with test_stack.py

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]


async def test_a_stopped_registry_is_registry_unavailable_after_the_timeout(
    own_stack: OwnStack,
) -> None:
    own_stack.must("start")
    settings = Settings(bootstrap_servers=own_stack.bootstrap,
                        schema_registry_url=own_stack.registry_url,
                        topic_prefix=unique("t"), feedback_timeout=3.0)
    # A broker just started on a loaded machine can take longer than the default 15 s to
    # lead a new topic's partitions (ci42: the rulestate topic was not ready in time); the
    # test is about the registry, not that.
    TenantAdmin(settings, timeout=120.0).create_tenant("acme", 1)
    # The writes before the outage wait as long as the first writes to a new topic on a
    # loaded machine may take (ci63: over 3 s); only the call under test has the short one.
    writer = StreamsClient(Runtime(settings.replace(feedback_timeout=60.0)))
    ws = writer.workspace("acme", "prod")
    spike = await ws.append(AppEvent(name="ops:error_spike"))
    await ws.append(RunStarted(run_id="run_1", rule="r", action="a", firing_id="f"),
                    correlation_id=spike.id)
    writer.close()

    own_stack.must("stop-registry")
    client = StreamsClient(Runtime(settings))  # a fresh serde: no schema cached
    ada = client.workspace("acme", "prod", actor=UserActor(id="ada"))
    try:
        with pytest.raises(RegistryUnavailable, match="SCHEMA_REGISTRY_URL") as raised:
            await ada.give_feedback(TriageQuality(correct=True, severity="low"),
                                    on=RunTarget(run_id="run_1"))
    finally:
        client.close()
    assert isinstance(raised.value, KafkaUnavailable)
    assert "STREAMS_FEEDBACK_TIMEOUT" in str(raised.value)
    assert "gave up after 3 s" in str(raised.value)  # it waited the outage out first

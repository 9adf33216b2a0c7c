"""The event log's errors (streams.adapters.kafka.log.EventLog): an append not acknowledged
in time says whether the brokers answer a new client, so the caller knows what to fix."""

from __future__ import annotations

from typing import Any, cast

import pytest

from streams.adapters.kafka.log import EventLog
from streams.settings import Settings


@pytest.mark.parametrize(("answers", "says"), [
    (None, "check that the brokers in KAFKA_BOOTSTRAP_SERVERS are up"),
    (False, "check that the brokers in KAFKA_BOOTSTRAP_SERVERS are up"),
    (True, "although the brokers answer a new client: the partition's leader was slow to "
           "take the write"),
])
async def test_an_unacknowledged_append_says_whether_the_brokers_answer_others(
        answers: bool | None, says: str) -> None:
    probe = None if answers is None else (lambda: answers)
    log = EventLog(Settings(), cast(Any, None), producer=cast(Any, object()),
                   broker_answers=probe)
    said = await log._unacknowledged("fs.acme.events", 3.0)
    assert said.startswith("append to fs.acme.events not acknowledged within 3 s "
                           "(STREAMS_FEEDBACK_TIMEOUT)")
    assert says in said

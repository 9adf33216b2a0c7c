"""Actions and retry policies."""

from datetime import timedelta

import pytest

from streams.core.rules import (
    RetryPolicy,
    run,
)


def test_retry_policy_delays() -> None:
    policy = RetryPolicy(max_attempts=5, backoff=timedelta(seconds=1), multiplier=2,
                         max_backoff=timedelta(seconds=5))
    assert [policy.delay(a) for a in range(1, 6)] == [
        timedelta(seconds=s) for s in (1, 2, 4, 5, 5)
    ]
    assert policy.delay(10**9) == timedelta(seconds=5)
    assert policy.retries_after(4) and not policy.retries_after(5)
    flat = RetryPolicy(multiplier=1, backoff=timedelta(seconds=3))
    assert flat.delay(10**9) == timedelta(seconds=3)
    with pytest.raises(ValueError, match="from 1"):
        policy.delay(0)


def test_run_takes_a_name_or_a_named_action() -> None:
    class Judge:
        name = "opened-incident"

    action = run(Judge())
    assert action.name == "opened-incident"
    assert action.retry == RetryPolicy()
    assert run("triage", retry=RetryPolicy(max_attempts=1)).retry.max_attempts == 1

"""Retry policy: defaults from settings, workflow and activity overrides, backoff with jitter."""

from __future__ import annotations

import pytest

from broker.runtime.failures.retry import RetryPolicy, policy_for
from broker.settings import Settings


def test_the_activity_policy_overrides_the_workflow_which_overrides_settings(
    settings: Settings,
) -> None:
    # Given settings defaults (5, 1s, 300s), a workflow policy and an activity policy
    policy = policy_for(
        settings.replace(retry_max_attempts=5, retry_initial_delay=1.0, retry_max_delay=300.0),
        activity_policy={"maxAttempts": 2},
        workflow_properties={"retry": {"maxAttempts": 4, "initialDelay": 0.5}},
    )
    # Then each field comes from the most specific place that sets it
    assert policy == RetryPolicy(max_attempts=2, initial_delay=0.5, max_delay=300.0)


def test_invalid_policy_fields_fall_back_to_the_defaults(settings: Settings) -> None:
    base = RetryPolicy.from_settings(settings)
    merged = base.merged({"maxAttempts": "many", "initialDelay": -1, "maxDelay": True})
    assert merged == base


@pytest.mark.parametrize(("attempt", "ceiling"), [(2, 1.0), (3, 2.0), (4, 4.0), (10, 10.0)])
def test_backoff_is_exponential_with_full_jitter_capped_at_max_delay(
    attempt: int, ceiling: float
) -> None:
    policy = RetryPolicy(max_attempts=10, initial_delay=1.0, max_delay=10.0)
    # Full jitter: anywhere between 0 and the exponential ceiling
    assert policy.delay(attempt, rand=lambda: 1.0) == ceiling
    assert policy.delay(attempt, rand=lambda: 0.0) == 0.0
    assert policy.delay(attempt, rand=lambda: 0.5) == ceiling / 2


def test_a_retry_after_hint_is_a_lower_bound_up_to_max_delay() -> None:
    policy = RetryPolicy(max_attempts=5, initial_delay=1.0, max_delay=30.0)
    assert policy.delay(2, hint=12.0, rand=lambda: 0.1) == 12.0
    assert policy.delay(2, hint=100.0, rand=lambda: 0.1) == 30.0


def test_attempts_run_out_at_max_attempts() -> None:
    policy = RetryPolicy(max_attempts=3, initial_delay=1.0, max_delay=5.0)
    assert [policy.exhausted(n) for n in (1, 2, 3, 4)] == [False, False, True, True]


def test_each_policy_field_is_read_from_its_own_key_and_zero_is_a_valid_value() -> None:
    # Given a policy and an override that sets every field, zero included
    base = RetryPolicy(max_attempts=5, initial_delay=1.0, max_delay=300.0)
    merged = base.merged({"maxAttempts": 0, "initialDelay": 0, "maxDelay": 60})
    # Then each field takes its own key's value (zero is not "missing"), as the field's type
    assert merged == RetryPolicy(max_attempts=0, initial_delay=0.0, max_delay=60.0)
    assert isinstance(merged.max_delay, float)
    assert isinstance(merged.initial_delay, float)
    assert isinstance(merged.max_attempts, int)

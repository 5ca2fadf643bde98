"""Retry policy for activities that fail transiently: exponential backoff with full jitter
(docs/design.md, section 7)."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Mapping
from typing import Any

from broker.settings import Settings


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int
    initial_delay: float
    max_delay: float

    @classmethod
    def from_settings(cls, settings: Settings) -> RetryPolicy:
        return cls(
            max_attempts=settings.retry_max_attempts,
            initial_delay=settings.retry_initial_delay,
            max_delay=settings.retry_max_delay,
        )

    def merged(self, raw: Mapping[str, Any] | None) -> RetryPolicy:
        """This policy with the fields ``raw`` (a ``customProperties.retry`` object) sets."""
        if not isinstance(raw, Mapping):
            return self
        return RetryPolicy(
            max_attempts=_number(raw, "maxAttempts", self.max_attempts, int),
            initial_delay=_number(raw, "initialDelay", self.initial_delay, float),
            max_delay=_number(raw, "maxDelay", self.max_delay, float),
        )

    def exhausted(self, attempt: int) -> bool:
        """Whether ``attempt`` (1 = the first run) was the last one allowed."""
        return attempt >= self.max_attempts

    def delay(
        self,
        next_attempt: int,
        *,
        hint: float | None = None,
        rand: Callable[[], float] = random.random,
    ) -> float:
        """Seconds to wait before ``next_attempt`` (2 = the first retry)."""
        ceiling = min(self.max_delay, self.initial_delay * 2 ** max(0, next_attempt - 2))
        delay = rand() * ceiling
        if hint is not None and hint > delay:
            delay = min(hint, self.max_delay)
        return max(0.0, float(delay))


def policy_for(
    settings: Settings,
    *,
    activity_policy: Mapping[str, Any] | None,
    workflow_properties: Mapping[str, Any] | None,
) -> RetryPolicy:
    """The effective policy: settings, overridden by the workflow's, then the activity's."""
    workflow_policy = (workflow_properties or {}).get("retry")
    return (
        RetryPolicy.from_settings(settings)
        .merged(workflow_policy if isinstance(workflow_policy, Mapping) else None)
        .merged(activity_policy)
    )


def _number(raw: Mapping[str, Any], key: str, default: Any, kind: Callable[[Any], Any]) -> Any:
    value = raw.get(key)
    if value is None or isinstance(value, bool):
        return default
    try:
        converted = kind(value)
    except (TypeError, ValueError):
        return default
    return converted if converted >= 0 else default

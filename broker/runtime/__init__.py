"""Durable execution: outbox, runner, bookmarks, timers, retries, dead letters, recovery."""

from broker.runtime import audit as _audit  # noqa: F401  (audit events become log lines)

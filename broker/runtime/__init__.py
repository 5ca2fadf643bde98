"""Durable execution: outbox, runner, bookmarks, timers, retries, dead letters, recovery."""

"""Test doubles shared by the tiers: one recording sender instead of a copy per test module."""

from __future__ import annotations

from broker.store.models import OutboxRow


class RecordingSender:
    """Stands in for Celery: remembers every outbox row it was asked to send, in order."""

    def __init__(self) -> None:
        self.sent: list[OutboxRow] = []

    def send(self, row: OutboxRow) -> None:
        self.sent.append(row)

"""Test doubles shared by the tiers: transports that stand in for Celery."""

from __future__ import annotations

from broker.store.models import OutboxRow


class RecordingSender:
    """Stands in for Celery: remembers every outbox row it was asked to send, in order."""

    def __init__(self) -> None:
        self.sent: list[OutboxRow] = []

    def send(self, row: OutboxRow) -> None:
        self.sent.append(row)


class NoSender:
    """A transport that sends nothing: the rows are run in process by ``drain``."""

    def send(self, row: OutboxRow) -> None:
        """Nothing to do: ``drain`` runs every unfinished row."""

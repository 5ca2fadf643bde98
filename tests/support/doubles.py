"""Test doubles shared by the tiers: transports that stand in for Celery."""

from __future__ import annotations

from collections.abc import Sequence

from broker.runtime.ports import OutboxMessage
from broker.store.models import OutboxRow


class RecordingSender:
    """Stands in for Celery: remembers every outbox row it was asked to send, in order; with
    ``fail``, every send fails as with a transport that is down."""

    def __init__(self, fail: bool = False) -> None:
        self.sent: list[OutboxRow] = []
        self.fail = fail

    @property
    def ids(self) -> list[str]:
        """The ids of the rows sent, in order."""
        return [row.id for row in self.sent]

    def send(self, row: OutboxRow) -> None:
        if self.fail:
            raise ConnectionError("transport down")
        self.sent.append(row)


class NoSender:
    """A transport that sends nothing: the rows are run in process by ``drain``."""

    def send(self, row: OutboxRow) -> None:
        """Nothing to do: ``drain`` runs every unfinished row."""


class RecordingPublisher:
    """Stands in for the publisher: remembers which outbox rows it was asked to publish after a
    commit. Rows stay pending (``dispatch_lease`` None): in-process tests have no relay to cover a
    lost publish."""

    dispatch_lease: float | None = None

    def __init__(self) -> None:
        self.published: list[str] = []

    def publish(self, outbox_ids: Sequence[str]) -> None:
        self.published.extend(outbox_ids)

    def publish_new(self, messages: Sequence[OutboxMessage]) -> None:
        self.published.extend(m.outbox_id for m in messages)

"""The runtime's shared interfaces, each declared once: what a caller hands the runtime (a
publisher, a sender, a lock provider) and what it reads of a workflow the registry pinned."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, Self

from broker.store.models import OutboxRow

logger = logging.getLogger(__name__)


class PinnedWorkflow(Protocol):
    """The workflow version a request is pinned to (the registry's PublishedWorkflow)."""

    @property
    def definition_id(self) -> str: ...
    @property
    def version(self) -> int: ...
    @property
    def version_id(self) -> str: ...
    @property
    def queue(self) -> str | None: ...


@dataclasses.dataclass(frozen=True)
class OutboxMessage:
    """What a fast path needs to send an outbox row it has just committed, without reading it
    back: the row's id (the task id), task, queue and arguments."""

    outbox_id: str
    task_name: str
    queue: str
    args: Mapping[str, Any]
    request_id: str | None = None


class Publisher(Protocol):
    """Publishes committed outbox rows at once (the fast path; the relay covers failures)."""

    @property
    def dispatch_lease(self) -> float | None:
        """Seconds a new submission's row may be inserted as already dispatched, because
        ``publish_new`` sends it right after the commit (the relay republishes it when this lease
        runs out without a result); None: insert it pending and leave it to ``publish``/the relay.
        """
        ...

    def publish(self, outbox_ids: Sequence[str]) -> None: ...

    def publish_new(self, messages: Sequence[OutboxMessage]) -> None:
        """Send rows committed just now by this caller (no read back, no write)."""
        ...


class NullPublisher:
    """Publishes nothing: rows stay pending until the outbox relay claims them."""

    dispatch_lease: float | None = None

    def publish(self, outbox_ids: Sequence[str]) -> None:
        logger.debug("no publisher; %d outbox rows left to the relay", len(outbox_ids))

    def publish_new(self, messages: Sequence[OutboxMessage]) -> None:
        logger.debug("no publisher; %d outbox rows left to the relay", len(messages))


class Sender(Protocol):
    """Puts one outbox row's task on the transport (``celery_app.send_task`` in production)."""

    def send(self, row: OutboxRow) -> None: ...


class Lock(Protocol):
    """A held lock. ``release`` is idempotent and never removes another holder's lock."""

    name: str

    def owned(self) -> bool:
        """Whether this holder still holds the lock (False after release or expiry)."""

    def extend(self, ttl: float | None = None) -> None:
        """Keep the lock ``ttl`` more seconds from now (None: the TTL it was taken with).

        Raises ``LockLost`` when the lock is no longer held by this holder."""

    def release(self) -> None:
        """Let the next holder in."""

    def __enter__(self) -> Self: ...

    def __exit__(self, *exc_info: object) -> None: ...


class LockProvider(Protocol):
    """Hands out named locks; one per process, safe to share between threads."""

    def acquire(
        self, name: str, *, ttl: float | None = None, timeout: float | None = 0.0
    ) -> Lock | None:
        """Take ``name`` for ``ttl`` seconds (None: ``BROKER_LOCK_TTL``), waiting up to
        ``timeout`` seconds; None when it stayed busy. Raises ``LockNotAcquired`` when the
        backend itself is unreachable."""

    def close(self) -> None:
        """Free the provider's connections (held locks stay valid until released)."""

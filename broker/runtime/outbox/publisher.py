"""The fast path: publish committed outbox rows at once, after the transaction that wrote them."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from broker.runtime.outbox import rows as outbox
from broker.runtime.ports import OutboxMessage, Sender
from broker.settings import Settings
from broker.store.db import transaction
from broker.store.models import OutboxRow
from broker.telemetry import tracing

logger = logging.getLogger(__name__)

#: fail fast when the transport is down: the relay retries later, a caller must not hang
PUBLISH_RETRY_POLICY = {
    "max_retries": 2,
    "interval_start": 0,
    "interval_step": 0.2,
    "interval_max": 0.5,
}


class CelerySender:
    """Sends an outbox row as a Celery task by name (``broker`` never imports ``tasks``)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    def send(self, row: OutboxRow, producer: Any = None) -> None:
        # The trace context the row was written under travels in the message headers.
        args, traceparent = tracing.split(row.args)
        with tracing.publishing(row.task_name, row.id, traceparent) as headers:
            self.app.send_task(
                row.task_name,
                kwargs={**args, "outbox_id": row.id},
                task_id=row.id,
                queue=row.queue,
                retry=True,
                retry_policy=PUBLISH_RETRY_POLICY,
                producer=producer,
                headers=headers or None,
            )

    def send_all(self, rows: Sequence[OutboxRow]) -> list[Exception | None]:
        """Send several rows on one producer (one pooled transport connection acquired once);
        answers each row's error, or None where it was sent.

        Where the transport batches publishes (kombu's ``Producer.batch``: Redis sends the lot in
        one pipelined round trip), the rows go out together when the batch ends; if that fails,
        every row of the batch answers the error (the relay publishes them again, and a task sent
        twice is recognised by its outbox id)."""
        errors: list[Exception | None] = []
        with self.app.producer_or_acquire() as producer:
            batch = getattr(producer, "batch", None)
            try:
                with batch() if batch is not None else contextlib.nullcontext():
                    for row in rows:
                        try:
                            self.send(row, producer)
                        except Exception as exc:
                            errors.append(exc)
                        else:
                            errors.append(None)
            except Exception as exc:  # the batch's flush failed: none is known to be sent
                errors = [exc] * len(rows)
        return errors


class OutboxPublisher:
    """``publish(outbox_ids)`` after commit: send each due pending row, then mark it dispatched
    (only if it is still pending: the consumer may already have finished it)."""

    def __init__(self, settings: Settings, factory: sessionmaker[Session], sender: Sender) -> None:
        self.settings = settings
        self.factory = factory
        self.sender = sender

    @property
    def dispatch_lease(self) -> float | None:
        return self.settings.outbox_lease

    def publish_new(self, messages: Sequence[OutboxMessage]) -> None:
        """Send new rows (a batch of submissions' together, on one producer where the sender
        can); each row whose send failed goes back to the relay."""
        rows = [
            OutboxRow(
                id=message.outbox_id,
                task_name=message.task_name,
                queue=message.queue,
                args=dict(message.args),
                request_id=message.request_id,
            )
            for message in messages
        ]
        errors = self._send_all(rows)
        for row, error in zip(rows, errors, strict=True):
            if error is not None:
                self._hand_back(row.id, f"publish failed: {error}")

    def _send_all(self, rows: Sequence[OutboxRow]) -> list[Exception | None]:
        send_all = getattr(self.sender, "send_all", None)
        if send_all is None or len(rows) < 2:
            return [self._send(row) for row in rows]
        try:
            errors: list[Exception | None] = send_all(rows)
        except Exception as exc:
            # No producer (the transport is down): every row goes back to the relay.
            errors = [exc] * len(rows)
        for row, error in zip(rows, errors, strict=True):
            if error is not None:
                logger.warning(
                    "fast-path publish of outbox row %s failed (%s); the relay will retry",
                    row.id,
                    error,
                    extra={"outbox_id": row.id, "request_id": row.request_id},
                )
        return errors

    def _send(self, row: OutboxRow) -> Exception | None:
        """Send one row; a failure is logged and answered (the relay will publish the row)."""
        try:
            self.sender.send(row)
        except Exception as exc:
            logger.warning(
                "fast-path publish of outbox row %s failed (%s); the relay will retry",
                row.id,
                exc,
                extra={"outbox_id": row.id, "request_id": row.request_id},
            )
            return exc
        return None

    def _hand_back(self, outbox_id: str, error: str) -> None:
        """Put a row inserted as dispatched back to pending, due now, so the relay publishes it
        on its next run instead of after the whole lease."""
        try:
            with transaction(self.factory) as session:
                outbox.postpone(session, outbox_id, delay=0, error=error)
        except Exception:
            # The lease still runs out: the relay republishes the row then.
            logger.warning(
                "could not hand outbox row %s back to the relay", outbox_id, exc_info=True
            )

    def publish(self, outbox_ids: Sequence[str]) -> None:
        try:
            with transaction(self.factory, write=False) as session:
                rows = outbox.pending_ids(session, outbox_ids)
                session.expunge_all()
        except Exception:
            logger.warning("fast-path publish skipped; the relay will publish", exc_info=True)
            return
        for row in rows:
            if self._send(row) is not None:
                continue
            try:
                with transaction(self.factory) as session:
                    outbox.mark_dispatched(
                        session, row.id, lease=self.settings.outbox_lease, only_pending=True
                    )
            except Exception:
                # Published but not marked: the relay publishes it once more; the task adapter
                # recognises the duplicate by its outbox id.
                logger.warning("could not mark outbox row %s dispatched", row.id, exc_info=True)

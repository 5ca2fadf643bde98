"""The fast path: publish committed outbox rows at once, after the transaction that wrote them."""

from __future__ import annotations

import contextlib
import logging
import time
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

#: fail fast when the transport is down: the relay retries later, a caller must not hang (one
#: retry reconnects a pooled connection a Redis restart left stale; with the transport's socket
#: timeouts a send to a Redis cut off by a partition gives up within about 8 s)
PUBLISH_RETRY_POLICY = {
    "max_retries": 1,
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


#: after a send failed, seconds during which the fast path sends nothing and hands its rows to
#: the relay at once: while the transport is out (a restart, a partition), a submission is
#: answered at the database's pace instead of waiting for a send that will fail
FAST_PATH_BACKOFF = 30.0


class OutboxPublisher:
    """``publish(outbox_ids)`` after commit: send each due pending row, then mark it dispatched
    (only if it is still pending: the consumer may already have finished it)."""

    def __init__(self, settings: Settings, factory: sessionmaker[Session], sender: Sender) -> None:
        self.settings = settings
        self.factory = factory
        self.sender = sender
        #: until when (monotonic) the fast path stands aside after a failed send
        self._quiet_until = 0.0

    def _quiet(self) -> bool:
        return time.monotonic() < self._quiet_until

    def _failed(self) -> None:
        self._quiet_until = time.monotonic() + FAST_PATH_BACKOFF

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
        if self._quiet():
            self._hand_back([row.id for row in rows], "publish skipped: the transport is failing")
            return
        errors = self._send_all(rows)
        failed = [row.id for row, error in zip(rows, errors, strict=True) if error is not None]
        if failed:
            self._failed()
            first = next(error for error in errors if error is not None)
            self._hand_back(failed, f"publish failed: {first}")

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

    def _hand_back(self, outbox_ids: Sequence[str], error: str) -> None:
        """Put rows inserted as dispatched back to pending, due now (one transaction), so the
        relay publishes them on its next run instead of after the whole lease."""
        try:
            with transaction(self.factory) as session:
                for outbox_id in outbox_ids:
                    outbox.postpone(session, outbox_id, delay=0, error=error)
        except Exception:
            # The lease still runs out: the relay republishes the rows then.
            logger.warning(
                "could not hand outbox rows %s back to the relay", list(outbox_ids), exc_info=True
            )

    def publish(self, outbox_ids: Sequence[str]) -> None:
        if self._quiet():
            return  # the rows are pending: the relay publishes them
        try:
            with transaction(self.factory, write=False) as session:
                rows = outbox.pending_ids(session, outbox_ids)
                session.expunge_all()
        except Exception:
            logger.warning("fast-path publish skipped; the relay will publish", exc_info=True)
            return
        for row in rows:
            if self._quiet():
                return  # a send just failed: the relay publishes the rest
            if self._send(row) is not None:
                self._failed()
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

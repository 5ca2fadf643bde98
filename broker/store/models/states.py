"""The states stored in the tables' status columns, as ``str`` enums."""

from __future__ import annotations

import enum


class RequestStatus(enum.StrEnum):
    QUEUED = "Queued"
    PROCESSING = "Processing"
    COMPLETED = "Completed"
    FAULTED = "Faulted"
    CANCELLED = "Cancelled"

    @property
    def terminal(self) -> bool:
        return self in (RequestStatus.COMPLETED, RequestStatus.FAULTED, RequestStatus.CANCELLED)


class InstanceStatus(enum.StrEnum):
    RUNNING = "Running"
    FINISHED = "Finished"


class InstanceSubStatus(enum.StrEnum):
    PENDING = "Pending"
    EXECUTING = "Executing"
    SUSPENDED = "Suspended"
    FINISHED = "Finished"
    FAULTED = "Faulted"
    CANCELLED = "Cancelled"


class OutboxState(enum.StrEnum):
    PENDING = "pending"  # committed, not yet published (or due for a retry at available_at)
    DISPATCHED = "dispatched"  # published; the consumer has not recorded its result yet
    DONE = "done"  # the consumer finished it
    DEAD = "dead"  # gave up after max_outbox_delivery_attempts; see dead_letters


class DeadLetterKind(enum.StrEnum):
    REQUEST = "request"  # a request whose retries ran out
    OUTBOX = "outbox"  # an outbox row that could not be delivered
    BOOKMARK = "bookmark"  # a bookmark-queue item (reason Failed or Expired)
    WEBHOOK = "webhook"  # a webhook delivery that failed for its whole horizon


class WebhookDeliveryState(enum.StrEnum):
    PENDING = "pending"  # the next attempt is due at next_attempt_at
    DELIVERED = "delivered"  # the receiver answered 2xx
    DEAD = "dead"  # given up: see dead_letters (kind webhook)

"""Deterministic ids: the same work always gets the same id, so a redelivered task collides
with its first run (a primary-key conflict or an existing row) instead of doing it twice."""

from __future__ import annotations

import uuid

#: the namespace of every derived id (fixed forever: changing it would orphan running work)
NAMESPACE = uuid.UUID("0f3c2f7e-6a51-4f7d-9c38-6b1d2c4e8a90")

#: the StepResult key of a start that is written and not yet run
PENDING_START = "pending-start"


def derive(*parts: str) -> str:
    """A UUID (as text) derived from ``parts``; equal parts give equal ids in every process."""
    return str(uuid.uuid5(NAMESPACE, "\x1f".join(parts)))


def instance_id_for_request(request_id: str) -> str:
    """The id of the root workflow instance that runs request ``request_id``."""
    return derive("instance", request_id)


def outbox_id_for(kind: str, *parts: str) -> str:
    """The id of an outbox row the runtime writes for ``kind`` (a command, a retry, a resume)."""
    return derive("outbox", kind, *parts)


def timer_id_for(bookmark_id: str) -> str:
    return derive("timer", bookmark_id)


def queue_item_id_for(*parts: str) -> str:
    """The id of a bookmark-queue item the runtime enqueues (a child's completion, a result)."""
    return derive("queue-item", *parts)


def dead_letter_id_for(kind: str, source_id: str) -> str:
    return derive("dead-letter", kind, source_id)


def new_id() -> str:
    """A random id for work that has no natural key (an operator's replay)."""
    return str(uuid.uuid4())

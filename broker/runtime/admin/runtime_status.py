"""The workflow runtime's status: the pause flag, the outbox's open work, the bookmark queue."""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from broker.runtime.outbox.pause import is_paused, paused_flag
from broker.runtime.requests.queries import iso
from broker.store.models import OutboxRow, OutboxState
from broker.telemetry.metrics import bookmark_queue_counts


def runtime_view(session: Session) -> dict[str, Any]:
    """The pause flag and the outbox's open work: ``inFlight`` rows were handed to a worker and
    not finished yet, ``pending`` rows wait to be published. Paused with nothing in flight is
    drained: no workflow step runs anywhere."""
    paused = is_paused(session)
    flag = paused_flag(session)
    counts: dict[str, int] = {
        str(state): int(count)
        for state, count in session.execute(
            select(OutboxRow.state, func.count())
            .where(OutboxRow.state.in_([OutboxState.PENDING.value, OutboxState.DISPATCHED.value]))
            .group_by(OutboxRow.state)
        )
    }
    in_flight = int(counts.get(OutboxState.DISPATCHED.value, 0))
    waiting, delivered = bookmark_queue_counts(session)
    return {
        "paused": paused,
        "updatedAt": iso(flag.updated_at) if flag is not None else None,
        "inFlight": in_flight,
        "pending": int(counts.get(OutboxState.PENDING.value, 0)),
        "drained": paused and in_flight == 0,
        # items delivered are kept for deduplication; only the waiting ones are a backlog
        "bookmarkQueue": {"waiting": waiting, "delivered": delivered},
    }

"""Work run outside a workflow step for a waiting bookmark (a RunTask call, a task-mode Python
activity): how often its row was delivered, and its answer queued for the bookmark."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from broker.runtime import ids
from broker.runtime.bookmarks.queue import enqueue_stimulus
from broker.runtime.outbox import rows as outbox
from broker.runtime.parts import Store
from broker.store.db import transaction
from broker.store.models import OutboxRow


def attempts_so_far(rt: Store, outbox_id: str | None) -> int | None:
    """The deliveries of ``outbox_id`` so far (0 without a row); None when it is finished
    already (an earlier delivery answered), so this one must not run the work again."""
    with transaction(rt.factory, write=False) as session:
        if outbox.is_finished(session, outbox_id):
            return None
        if outbox_id is None:
            return 0
        stored = session.scalar(select(OutboxRow.attempts).where(OutboxRow.id == outbox_id))
        return stored or 0


def answer(
    rt: Store,
    *,
    outbox_id: str | None,
    kind: str,
    stimulus: str,
    payload: Any,
    instance_id: str,
    bookmark_id: str,
) -> bool:
    """Queue ``payload`` for the bookmark and finish the row, in one transaction: the answer is
    queued once (its item id derives from the bookmark), whichever delivery gives it, and never
    after the row is finished (a late answer of a call that ran past its time limit, whose fault
    answered already, is dropped). Answers whether this call queued it."""
    with transaction(rt.factory) as session:
        if outbox.is_finished(session, outbox_id):
            return False
        enqueue_stimulus(
            session,
            item_id=ids.queue_item_id_for(kind, instance_id, bookmark_id),
            name=stimulus,
            payload=payload,
            instance_id=instance_id,
            bookmark_id=bookmark_id,
        )
        outbox.mark_done(session, outbox_id)
    return True


def postpone(rt: Store, outbox_id: str | None, *, delay: float, error: str) -> None:
    """The work asked to be retried: its row is published again after ``delay`` seconds."""
    if outbox_id is not None:
        with transaction(rt.factory) as session:
            outbox.postpone(session, outbox_id, delay=delay, error=error)

"""One delivery of an outbox row's task: its start, committed before the work runs, and the count
of deliveries that ended with their worker process dead (docs/design.md, section 7: poison work).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

from sqlalchemy import and_, bindparam, case, func, inspect, not_, or_, select, update
from sqlalchemy.orm import Session, sessionmaker

from broker.settings import Settings
from broker.store.db import transaction
from broker.store.models import OutboxRow, OutboxState, table_of, utcnow

logger = logging.getLogger(__name__)

_OUTBOX = table_of(OutboxRow)
_C = _OUTBOX.c
_NOW = bindparam("now", type_=_C.started_at.type)
_RETRIES = bindparam("retries", type_=_C.start_retries.type)
_OPEN = _C.started_at.is_not(None)
#: the open start was made by the attempt this Celery retry follows: it raised (a death sends no
#: retry), and its own ``end`` could not be written (the database was unreachable)
_RETRIED = and_(_C.start_retries.is_not(None), _C.start_retries == _RETRIES - 1)
#: its delivery stopped beating the row's lease: it died (or was cut off from the database)
_EXPIRED = or_(_C.lease_expires_at.is_(None), _C.lease_expires_at <= _NOW)
_BUSY = and_(_OPEN, not_(_RETRIED), not_(_EXPIRED))
_DIED = and_(_OPEN, not_(_RETRIED), _EXPIRED)
_LIVE_STATES = (OutboxState.PENDING.value, OutboxState.DISPATCHED.value)
# A lost start only loses one count: not worth a flush of the WAL per task (a later synchronous
# commit of the session flushes it anyway). On PostgreSQL the statement itself makes its commit
# asynchronous (set_config in its RETURNING, evaluated for the row it updated), which saves the
# round trip of a SET LOCAL.
_ASYNC = func.set_config("synchronous_commit", "off", True).label("synchronous_commit")
# Built once (see ``table_of``): every task's delivery runs it.
_BEGIN = (
    update(_OUTBOX)
    .where(_C.id == bindparam("outbox_id"), _C.state.in_(_LIVE_STATES))
    .values(
        deaths=_C.deaths + case((_DIED, 1), else_=0),
        started_at=case((_BUSY, _C.started_at), else_=_NOW),
        start_retries=case((_BUSY, _C.start_retries), else_=_RETRIES),
        lease_expires_at=case((_BUSY, _C.lease_expires_at), else_=bindparam("lease_until")),
        state=OutboxState.DISPATCHED.value,
    )
    .returning(_C.started_at, _C.deaths)
)
_BEGIN_POSTGRES = _BEGIN.returning(_ASYNC)
#: what the work of a poisoned delivery is (read only then)
_WORK = select(_C.task_name, _C.queue, _C.args, _C.request_id, _C.instance_id).where(
    _C.id == bindparam("outbox_id")
)
_END = (
    update(_OUTBOX)
    .where(_C.id == bindparam("outbox_id"), _C.started_at == _NOW)
    .values(started_at=None, start_retries=None)
)
#: what the relay writes when it publishes a row again while a delivery's start is still open:
#: that delivery's lease ran out without a result, so it died; count it and close its start
CLOSE_DEAD_START: dict[str, Any] = {
    "deaths": OutboxRow.deaths + case((OutboxRow.started_at.is_not(None), 1), else_=0),
    "started_at": None,
    "start_retries": None,
}


@dataclasses.dataclass(frozen=True)
class Delivery:
    """A delivery's start: ``busy`` when another delivery holds the row and its lease is live
    (this one must not run it); ``deaths`` counts the deliveries before it that died; ``poisoned``
    when they reached ``BROKER_MAX_WORKER_DEATHS`` (the work is dead-lettered, not run). What the
    work is (task, queue, arguments, request, instance) is read only for a poisoned delivery."""

    outbox_id: str
    started_at: dt.datetime
    busy: bool
    deaths: int
    poisoned: bool
    task_name: str
    queue: str
    args: dict[str, Any]
    request_id: str | None
    instance_id: str | None


#: seconds before a process that found the columns missing looks again (after ``broker db
#: upgrade`` a running process starts counting within this, a new one at once)
RECHECK_ABSENT = 30.0
_tracked: dict[Any, tuple[bool, float]] = {}


def tracked(session: Session) -> bool:
    """Whether the database has the columns of poison work (migration 0005): on the schema before
    it (a rolling upgrade runs this code there for a while) nothing is counted, and every other
    statement of the outbox leaves the columns out."""
    bind = session.get_bind()
    known = _tracked.get(bind)
    now = time.monotonic()
    if known is not None and (known[0] or now < known[1]):
        return known[0]
    present = "deaths" in {column["name"] for column in inspect(bind).get_columns("outbox")}
    _tracked[bind] = (present, now + RECHECK_ABSENT)
    if not present:
        logger.warning("the outbox has no poison-work columns yet (broker db upgrade): not counted")
    return present


def begin(
    factory: sessionmaker[Session], settings: Settings, outbox_id: str, *, retries: int = 0
) -> Delivery | None:
    """Start a delivery of ``outbox_id`` (``retries``: Celery's retries of this message), in a
    transaction of its own committed before the work runs; None when the row is finished or
    unknown (the task recognises a finished row itself).

    An open start left by an earlier delivery whose lease ran out is a delivery that died: it is
    counted here, or by the relay when it publishes the row again (``rows.mark_all_dispatched``),
    whichever closes it first. The start itself renews the lease, which the heartbeat then keeps
    fresh while the work runs, so a live delivery never looks dead.
    """
    now = utcnow()
    lease_until = now + dt.timedelta(seconds=settings.outbox_lease)
    with transaction(factory) as session:
        if not tracked(session):
            return None
        postgres = session.get_bind().dialect.name == "postgresql"
        row = session.execute(
            _BEGIN_POSTGRES if postgres else _BEGIN,
            {"outbox_id": outbox_id, "now": now, "retries": retries, "lease_until": lease_until},
        ).first()
        if row is None:
            return None
        busy = row.started_at != now
        deaths = int(row.deaths or 0)
        poisoned = not busy and deaths >= settings.max_worker_deaths
        # The work's description is read only for poison, the rare case (no JSON on the hot path).
        work = session.execute(_WORK, {"outbox_id": outbox_id}).one() if poisoned else None
    delivery = Delivery(
        outbox_id=outbox_id,
        started_at=row.started_at if busy else now,
        busy=busy,
        deaths=deaths,
        poisoned=poisoned,
        task_name=str(work.task_name) if work is not None else "",
        queue=str(work.queue) if work is not None else "",
        args=dict(work.args or {}) if work is not None else {},
        request_id=work.request_id if work is not None else None,
        instance_id=work.instance_id if work is not None else None,
    )
    if deaths and not busy:
        logger.warning(
            "outbox row %s: %d earlier deliveries died running it",
            outbox_id,
            deaths,
            extra={"outbox_id": outbox_id, "request_id": delivery.request_id},
        )
    return delivery


def end(session: Session, delivery: Delivery) -> bool:
    """Close ``delivery``'s start when it is still the row's open one (a delivery that ended
    without recording a result: it raised, or left the row to the relay); never commits."""
    result = session.execute(_END, {"outbox_id": delivery.outbox_id, "now": delivery.started_at})
    return bool(result.rowcount)  # type: ignore[attr-defined]


def mark_dead(session: Session, outbox_id: str) -> bool:
    """Give up on an unfinished row without a result (its work was dead-lettered); False when it
    was finished already."""
    result = session.execute(
        update(OutboxRow)
        .where(OutboxRow.id == outbox_id, OutboxRow.state.in_(_LIVE_STATES))
        .values(
            state=OutboxState.DEAD.value,
            finished_at=utcnow(),
            lease_expires_at=None,
            started_at=None,
            start_retries=None,
        )
        .execution_options(synchronize_session=False)
    )
    note_finished(outbox_id)
    return bool(result.rowcount)  # type: ignore[attr-defined]


def end_quietly(factory: sessionmaker[Session], delivery: Delivery) -> None:
    """``end`` in a transaction of its own; a failure is logged, not raised: the caller is on
    its way out with an error of its own (an unreachable database leaves the start open, which
    the next attempt of the same message recognises, ``_RETRIED``)."""
    try:
        with transaction(factory) as session:
            end(session, delivery)
    except Exception:
        logger.warning(
            "the start of outbox row %s was not closed",
            delivery.outbox_id,
            exc_info=True,
            extra={"outbox_id": delivery.outbox_id},
        )


# What the running delivery's work recorded -------------------------------------------------------

_local = threading.local()


@dataclasses.dataclass
class Running:
    """The delivery this thread runs; ``finished`` once its work recorded a result for the row
    (done, postponed, dead), which closes the start in the same statement."""

    outbox_id: str
    finished: bool = False


@contextlib.contextmanager
def running(outbox_id: str) -> Iterator[Running]:
    """Track, while the ``with`` block runs the work, whether the work finished its row."""
    current = Running(outbox_id)
    previous = getattr(_local, "running", None)
    _local.running = current
    try:
        yield current
    finally:
        _local.running = previous


def note_finished(outbox_id: str | None) -> None:
    """Called by the statements that record a row's result (``rows.mark_done``, ``postpone``,
    ``mark_dead``): the running delivery need not close its start itself."""
    current: Running | None = getattr(_local, "running", None)
    if current is not None and current.outbox_id == outbox_id:
        current.finished = True

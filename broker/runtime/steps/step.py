"""One engine step of an instance (docs/design.md, section 3): lock it, plan the step from what is
saved, run the engine under a heartbeat, save the result atomically with the outbox row marked
done, then publish."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
import time
from collections.abc import Callable

from sqlalchemy import String, and_, bindparam, func, literal, select
from sqlalchemy.orm import Session

from broker.engine.api import Engine, EngineServices
from broker.engine.run.errors import EngineError, UnknownBookmark
from broker.engine.run.interpreter import executing
from broker.engine.run.results import RunResult
from broker.errors import Conflict, NotFound
from broker.runtime import webhooks
from broker.runtime.ids import PENDING_START
from broker.runtime.outbox import rows as outbox
from broker.runtime.outbox.outcome import Outcome
from broker.runtime.parts import Steps
from broker.runtime.persist import (
    Saved,
    StaleStep,
    Start,
    Target,
    open_start,
    save_step,
)
from broker.runtime.steps import ceiling
from broker.runtime.steps.effects import RecordedHttp, RecordedMailer
from broker.runtime.steps.heartbeat import beating
from broker.store.db import HeldRead, before_wait, begin_writing, transaction
from broker.store.models import (
    BookmarkQueueItem,
    OutboxRow,
    OutboxState,
    Request,
    StepResult,
    WebhookEndpoint,
    WorkflowInstance,
    table_of,
)
from broker.telemetry import metrics

logger = logging.getLogger(__name__)

#: how long a task waits for an instance another worker holds, before postponing its row
LOCK_WAIT_SECONDS = 5.0
#: when postponed, the row is published again after this many seconds
BUSY_DELAY_SECONDS = 1.0
#: seconds a request's first step may run before its start is written on its own (``Opening``)
OPEN_DELAY_SECONDS = 0.2


@dataclasses.dataclass(frozen=True)
class Step:
    """One engine call and the target it saves to; ``start``: a request's first step's start, not
    written yet (see ``Opening``)."""

    target: Target
    run: Callable[[Engine], RunResult]
    start: Start | None = None


@dataclasses.dataclass(frozen=True)
class Reads:
    """What a plan reads, in one statement: whether the outbox row is finished already, the
    instance, the request (named, or the instance's) and the instance's pending start. The
    request's webhook endpoints come along too, for the status changes the save writes in the
    same transaction (``webhooks.known_endpoints``)."""

    outbox_finished: bool
    instance: WorkflowInstance | None
    request: Request | None
    pending: StepResult | None


_ONE = select(literal(1).label("one")).subquery("one")
_ENDPOINTS = table_of(WebhookEndpoint)
# Built once (see ``table_of``): every task runs it. One row, whatever exists: outer joins from a
# one-row base, each on a primary key; one more row per further webhook endpoint of the request.
_READS = (
    select(
        select(OutboxRow.state)
        .where(OutboxRow.id == bindparam("outbox_id"))
        .scalar_subquery()
        .label("outbox_state"),
        WorkflowInstance,
        Request,
        StepResult,
        _ENDPOINTS.c.id.label("endpoint_id"),
        _ENDPOINTS.c.events.label("endpoint_events"),
    )
    .select_from(_ONE)
    .outerjoin(WorkflowInstance, WorkflowInstance.id == bindparam("instance_id"))
    .outerjoin(
        Request,
        Request.id
        == func.coalesce(bindparam("request_id", type_=String), WorkflowInstance.request_id),
    )
    .outerjoin(
        StepResult,
        and_(
            StepResult.instance_id == bindparam("instance_id"),
            StepResult.step_key == PENDING_START,
        ),
    )
    .outerjoin(_ENDPOINTS, webhooks.endpoints_condition(_ENDPOINTS, table_of(Request)))
)
_FINISHED = (OutboxState.DONE.value, OutboxState.DEAD.value)


def read_step(
    session: Session, instance_id: str, outbox_id: str | None, request_id: str | None = None
) -> Reads:
    """What the plan of a step on ``instance_id`` reads, in one round trip; ``request_id``: the
    request to read when the instance may not exist yet (else the instance's)."""
    rows = session.execute(
        _READS, {"outbox_id": outbox_id, "instance_id": instance_id, "request_id": request_id}
    ).all()
    row = rows[0]
    if row.Request is not None:
        endpoints = [(r.endpoint_id, r.endpoint_events) for r in rows if r.endpoint_id is not None]
        webhooks.known_endpoints(session, row.Request.id, endpoints)
    return Reads(
        outbox_finished=row.outbox_state in _FINISHED,
        instance=row.WorkflowInstance,
        request=row.Request,
        pending=row.StepResult,
    )


class Opening:
    """The start of a request's first step (its instance row and Queued -> Processing), written
    once: by the heartbeat when the step runs longer than ``OPEN_DELAY_SECONDS`` (clients then see
    Processing, recovery sees a heartbeat), else by the save of the step (``save_step``'s
    ``start``), so a short step commits its start and its result together. Either way the
    RequestProcessing event carries the time the step started. ``open_start`` answers False when
    the request is no longer Queued (cancelled meanwhile): the step's result is then dropped."""

    def __init__(self, start: Start | None) -> None:
        self._start = start
        self._lock = threading.Lock()
        self._state: bool | None = None if start is not None else True

    @property
    def pending(self) -> bool:
        return self._state is None

    def write_now(self, rt: Steps) -> None:
        """From the heartbeat thread: the step runs long, write its start in a transaction."""
        with self._lock:
            if self._state is not None or self._start is None:
                return
            with transaction(rt.factory) as session:
                opened = open_start(session, self._start)
            self._state = opened

    def settle(self) -> Start | None:
        """Before the save, once the heartbeat stopped: the start the save must write (None when
        the heartbeat wrote it); raises ``StaleStep`` when the request was no longer Queued.
        Waits for a write the heartbeat has in flight."""
        with self._lock:
            if self._state is None:
                self._state = True  # the save writes it (or rolls back with the step)
                return self._start
            if not self._state:
                raise StaleStep("the request is no longer queued")
            return None


def build_engine(rt: Steps, instance_id: str) -> Engine:
    """The engine of one step of ``instance_id``: its HTTP calls and e-mails are recorded as they
    complete, so a redone step replays them instead of acting twice (``effects``)."""
    services = EngineServices(
        http=RecordedHttp(rt.http, rt.factory, instance_id),
        mailer=RecordedMailer(rt.mailer, rt.factory, instance_id),
        write_line=_write_line,
        files=rt.files,
        strategies=rt.strategies,
    )
    return Engine(
        rt.definitions,
        services,
        flowchart_mode=rt.settings.flowchart_mode,
        js_time_limit=rt.settings.js_time_limit,
        js_memory_limit=rt.settings.js_memory_limit,
    )


def _write_line(text: str) -> None:
    logger.info("WriteLine: %s", text)


def advance(
    rt: Steps,
    instance_id: str,
    outbox_id: str | None,
    plan: Callable[[Session, Reads], Step | None],
    *,
    consumed_item: str | None = None,
    request_id: str | None = None,
) -> Outcome:
    """Lock the instance, plan the step from what is saved (``read_step``; ``request_id`` as
    there), run it, save it with the outbox row marked done, then publish the rows the step
    wrote."""
    log = {"instance_id": instance_id, "outbox_id": outbox_id}
    # The step ceiling counts from here, as Celery's hard time limit counts from the task's start.
    deadline = time.monotonic() + rt.settings.step_time_limit
    # Loading the registry publishes workflow files (write transactions): do it before this
    # task opens its own, or SQLite's single writer would wait on itself.
    _ = rt.registry
    lock = rt.locks.acquire(
        f"instance:{instance_id}", ttl=rt.settings.lock_ttl, timeout=LOCK_WAIT_SECONDS
    )
    if lock is None:
        if outbox_id is not None:
            with transaction(rt.factory) as session:
                outbox.postpone(session, outbox_id, delay=BUSY_DELAY_SECONDS, error="instance busy")
        logger.info("instance %s is busy; postponed %s", instance_id, outbox_id, extra=log)
        return Outcome.BUSY
    try:
        try:
            # One transaction reads, runs the step and saves it (on SQLite: one to read, one to
            # save, see ``before_wait``; for a step that runs long, the heartbeat ends the read
            # part, ``HeldRead``). Its reads lock nothing, and every write the save makes is
            # guarded (the instance's checkpoint, a request still Queued or not terminal), so
            # whatever changed while the engine ran makes the save fail as stale, never overwrite.
            with transaction(rt.factory, write=False) as session:
                reads = read_step(session, instance_id, outbox_id, request_id)
                if reads.outbox_finished:
                    return Outcome.SKIPPED
                step = plan(session, reads)
                if step is None:
                    begin_writing(session)
                    outbox.mark_done(session, outbox_id)
                    _consume_item(session, consumed_item)
                    logger.info("nothing to do for instance %s", instance_id, extra=log)
                    return Outcome.SKIPPED
                before_wait(session)
                held = HeldRead(session)
                opening = Opening(step.start)

                running_on = threading.get_ident()

                def overdue() -> bool:
                    ceiling.fault_overdue_step(
                        rt,
                        instance_id=instance_id,
                        outbox_id=outbox_id,
                        request_id=step.target.request_id,
                        queue=step.target.queue,
                        activity_id=executing(running_on),
                    )
                    return True  # the engine is still running: it is stuck

                with beating(
                    rt, instance_id, outbox_id, lock, opening, deadline, overdue,
                    open_delay=OPEN_DELAY_SECONDS, release=held.end,
                ):  # fmt: skip
                    result = _run_step(step, build_engine(rt, instance_id))
                held.take_back()
                start = opening.settle()
                begin_writing(session)
                # The save reads nothing it wrote itself, so its new rows (the audit events above
                # all) go to the database together at the commit, not one flush per statement.
                with session.no_autoflush:
                    saved = save_step(session, rt.settings, step.target, result, start=start)
                    outbox.mark_done(session, outbox_id)
                    _consume_item(session, consumed_item)
        except StaleStep:
            logger.warning(
                "instance %s moved on; this step's result is dropped", instance_id, extra=log
            )
            with transaction(rt.factory) as session:
                outbox.mark_done(session, outbox_id)
            return Outcome.STALE
        logger.info(
            "instance %s step %d saved: %s/%s",
            instance_id,
            saved.checkpoint,
            result.status,
            result.sub_status,
            extra={**log, "request_id": step.target.request_id},
        )
    except (SystemExit, KeyboardInterrupt):
        # The process stops mid-step: the worker's drain ran out (Celery cancels the task with a
        # signal that billiard turns into SystemExit in the pool process) or an operator stopped
        # it. Hand the step back so another worker redoes it now, not after the lease.
        _hand_back(rt, instance_id, outbox_id)
        raise
    finally:
        with contextlib.suppress(Exception):
            lock.release()
    if saved.outbox_ids:
        rt.publisher.publish(saved.outbox_ids)
    _record_step(step.target, saved, result)
    return Outcome.DONE


def _run_step(step: Step, engine: Engine) -> RunResult:
    """Run the step's engine call; the engine's refusals become the runtime's ``Conflict`` (a
    finished instance, nothing to retry) and ``NotFound`` (an unknown bookmark)."""
    try:
        return step.run(engine)
    except UnknownBookmark as exc:
        raise NotFound(exc.message) from exc
    except EngineError as exc:
        raise Conflict(exc.message) from exc


def _hand_back(rt: Steps, instance_id: str, outbox_id: str | None) -> None:
    """The process stops mid-step (the drain, docs/design.md section 8): make the step's outbox
    row due now, so the relay publishes it on its next run and another worker redoes the step
    (the caller releases the lock). The redone step answers the HTTP calls and e-mails already
    recorded from the record and repeats, with the same ``Idempotency-Key``, the one in flight.
    Without a row (a direct call), recovery redispatches the instance after the threshold."""
    log = {"instance_id": instance_id, "outbox_id": outbox_id}
    if outbox_id is None:
        logger.warning("instance %s interrupted mid-step; nothing to hand back", instance_id)
        return
    try:
        with transaction(rt.factory) as session:
            outbox.postpone(session, outbox_id, delay=0, error="worker stopped mid-step")
    except Exception:
        # The lease still runs out: the relay republishes the row then.
        logger.warning("could not hand outbox row %s back", outbox_id, exc_info=True, extra=log)
        return
    logger.warning(
        "instance %s interrupted mid-step: outbox row %s handed back",
        instance_id,
        outbox_id,
        extra=log,
    )


def _record_step(target: Target, saved: Saved, result: RunResult) -> None:
    """The metrics of a committed step: activity durations, a scheduled retry, a terminal request.

    Recorded only after the commit, so a step rolled back or dropped as stale counts nothing. A
    child workflow serves no request: its retries are labelled with its definition id.
    """
    try:
        metrics.record_journal(result.journal)
        if saved.retry_scheduled:
            metrics.record_retry(target.request_type or target.definition_id)
        if saved.request_status and target.request_type and target.submitted_at:
            metrics.record_finished(
                target.request_type, saved.request_status, target.submitted_at, saved.finished_at
            )
    except Exception:
        logger.warning(
            "metrics of instance %s were not recorded", target.instance_id, exc_info=True
        )


def _consume_item(session: Session, item_id: str | None) -> None:
    """Delete a stimulus addressed to one bookmark once it resumed it; an event that may have
    resumed several instances stays for the purge job (the other resumes still read it)."""
    if item_id is not None:
        item = session.get(BookmarkQueueItem, item_id)
        if item is not None and item.bookmark_id is not None:
            session.delete(item)

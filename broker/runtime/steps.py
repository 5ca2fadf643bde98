"""One engine step of an instance: lock it, plan the step from what is saved, run the engine under
a heartbeat, save the result atomically with the outbox row marked done, then publish.

The entry points of ``runner`` plan what to run; this module is the path they share (docs/design.md,
section 4). While the engine runs, a heartbeat thread keeps the instance's ``heartbeat_at``, the
outbox row's lease and the lock fresh, writes a long first step's start (``Opening``) and stops at
the step ceiling; when the worker dies the lease runs out and the relay publishes the row again.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterator

from sqlalchemy import update
from sqlalchemy.orm import Session

from broker import metrics
from broker.engine.api import Engine, EngineServices
from broker.engine.errors import EngineError, UnknownBookmark
from broker.engine.results import RunResult
from broker.errors import Conflict, NotFound
from broker.runtime import ceiling, outbox
from broker.runtime.effects import RecordedHttp, RecordedMailer
from broker.runtime.outcome import Outcome
from broker.runtime.persist import Saved, StaleStep, Target, save_step
from broker.runtime.ports import Lock
from broker.runtime.wiring import Runtime
from broker.store.db import transaction
from broker.store.models import (
    BookmarkQueueItem,
    WorkflowInstance,
    utcnow,
)

logger = logging.getLogger(__name__)

#: how long a task waits for an instance another worker holds, before postponing its row
LOCK_WAIT_SECONDS = 5.0
#: when postponed, the row is published again after this many seconds
BUSY_DELAY_SECONDS = 1.0
#: seconds a request's first step may run before its start is written on its own (``Opening``)
OPEN_DELAY_SECONDS = 0.2


@dataclasses.dataclass(frozen=True)
class Step:
    """One engine call and the target it saves to; ``open`` writes what must exist before the
    step's result can be saved (a request's first step: see ``Opening``)."""

    target: Target
    run: Callable[[Engine], RunResult]
    open: Callable[[Session], bool] | None = None


class Opening:
    """The start of a request's first step (its instance row and Queued -> Processing), written
    once: by the heartbeat when the step runs longer than ``OPEN_DELAY_SECONDS`` (clients then see
    Processing, recovery sees a heartbeat), else in the transaction that saves the step, so a
    short step commits its start and its result together. Either way the RequestProcessing event
    carries the time the step started. ``open`` answers False when the request is no longer
    Queued (cancelled meanwhile): the step's result is then dropped."""

    def __init__(self, open_: Callable[[Session], bool] | None) -> None:
        self._open = open_
        self._lock = threading.Lock()
        self._state: bool | None = None if open_ is not None else True

    @property
    def pending(self) -> bool:
        return self._state is None

    def write_now(self, rt: Runtime) -> None:
        """From the heartbeat thread: the step runs long, write its start in a transaction."""
        with self._lock:
            if self._state is not None or self._open is None:
                return
            with transaction(rt.factory) as session:
                opened = self._open(session)
            self._state = opened

    def wait(self) -> None:
        """Wait for a write the heartbeat has in flight (call before opening the saving
        transaction: on SQLite the two would wait for each other)."""
        with self._lock:
            pass

    def settle(self, session: Session) -> bool:
        """In the saving transaction, after ``wait``: write the start unless the heartbeat did;
        answers whether the step may be saved."""
        if self._state is None and self._open is not None:
            self._state = self._open(session)
        return bool(self._state)


def build_engine(rt: Runtime, instance_id: str) -> Engine:
    """The engine of one step of ``instance_id``: its HTTP calls and e-mails are recorded as they
    complete, so a redone step replays them instead of acting twice (``effects``)."""
    services = EngineServices(
        http=RecordedHttp(rt.http, rt.factory, instance_id),
        mailer=RecordedMailer(rt.mailer, rt.factory, instance_id),
        write_line=_write_line,
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
    rt: Runtime,
    instance_id: str,
    outbox_id: str | None,
    plan: Callable[[Session, WorkflowInstance | None], Step | None],
    *,
    consumed_item: str | None = None,
) -> Outcome:
    """Lock the instance, plan the step from what is saved, run it, save it with the outbox row
    marked done, then publish the rows the step wrote."""
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
        with transaction(rt.factory) as session:
            if outbox.is_finished(session, outbox_id):
                return Outcome.SKIPPED
            instance = session.get(WorkflowInstance, instance_id)
            step = plan(session, instance)
            if step is None:
                outbox.mark_done(session, outbox_id)
                _consume_item(session, consumed_item)
                logger.info("nothing to do for instance %s", instance_id, extra=log)
                return Outcome.SKIPPED
        opening = Opening(step.open)

        def overdue() -> None:
            ceiling.fault_overdue_step(
                rt,
                instance_id=instance_id,
                outbox_id=outbox_id,
                request_id=step.target.request_id,
                queue=step.target.queue,
            )

        with _heartbeat(rt, instance_id, outbox_id, lock, opening, deadline, overdue):
            result = _run_step(step, build_engine(rt, instance_id))
        opening.wait()
        try:
            # The save reads nothing it wrote itself, so its new rows (the audit events above
            # all) go to the database together at the commit, not one flush per statement.
            with transaction(rt.factory) as session, session.no_autoflush:
                if not opening.settle(session):
                    raise StaleStep(f"request of instance {instance_id} is no longer queued")
                saved = save_step(session, rt.settings, step.target, result)
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


def _hand_back(rt: Runtime, instance_id: str, outbox_id: str | None) -> None:
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


@contextlib.contextmanager
def _heartbeat(
    rt: Runtime,
    instance_id: str,
    outbox_id: str | None,
    lock: Lock,
    opening: Opening,
    deadline: float,
    overdue: Callable[[], None],
) -> Iterator[None]:
    """Beat while the engine runs: a pending opening after ``OPEN_DELAY_SECONDS``, then the
    instance heartbeat, outbox lease and lock TTL, until the step ends or reaches ``deadline``
    (``time.monotonic()``): there the beating stops and ``overdue`` records the fault (the
    watchdog of ``broker.runtime.ceiling``; Celery's hard time limit then replaces the process).
    """
    stop = threading.Event()
    interval = max(0.5, min(rt.settings.heartbeat_interval, rt.settings.lock_ttl / 3))

    def watch() -> bool:
        """False once the step is over its deadline (after recording its fault)."""
        if time.monotonic() < deadline:
            return True
        try:
            overdue()
        except Exception:
            logger.error("fault of overdue instance %s not recorded", instance_id, exc_info=True)
        return False

    def beat() -> None:
        if opening.pending and not stop.wait(min(OPEN_DELAY_SECONDS, _left(deadline))):
            try:
                opening.write_now(rt)
            except Exception:
                logger.warning("start of instance %s not written", instance_id, exc_info=True)
        while not stop.wait(min(interval, _left(deadline))):
            if not watch():
                return
            try:
                with transaction(rt.factory) as session:
                    session.execute(
                        update(WorkflowInstance)
                        .where(WorkflowInstance.id == instance_id)
                        .values(heartbeat_at=utcnow())
                        .execution_options(synchronize_session=False)
                    )
                    if outbox_id is not None:
                        outbox.extend_lease(session, outbox_id, rt.settings.outbox_lease)
                lock.extend(rt.settings.lock_ttl)
            except Exception:
                logger.warning("heartbeat of instance %s failed", instance_id, exc_info=True)

    thread = threading.Thread(target=beat, name=f"heartbeat-{instance_id}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=5)


def _left(deadline: float) -> float:
    return max(deadline - time.monotonic(), 0.0)

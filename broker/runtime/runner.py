"""Running workflow instances: start, resume, retry; one engine step per task, saved atomically.

Every entry point is safe to run twice (docs/design.md, section 4): the consumed outbox row tells
whether the work was already done, the instance lock keeps two workers off one instance, and the
save is fenced on the instance's checkpoint, so a redelivered or duplicated task either finds its
work done or redoes exactly the step that was not saved. While the engine runs, a heartbeat thread
keeps the instance's ``heartbeat_at``, the outbox row's lease and the lock fresh; when the worker
dies the lease runs out and the relay publishes the row again.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from sqlalchemy import insert, select, update
from sqlalchemy.orm import Session

from broker import metrics
from broker.engine.api import Engine, EngineServices
from broker.engine.errors import EngineError, UnknownBookmark
from broker.errors import BadRequest, Conflict, NotFound, Unauthenticated
from broker.runtime import ceiling, ids, outbox
from broker.runtime.effects import RecordedHttp, RecordedMailer
from broker.runtime.outcome import Outcome
from broker.runtime.persist import PENDING_START, Saved, StaleStep, Target, save_step
from broker.runtime.remote import dispatch_remote
from broker.runtime.statuses import finish_request, start_processing
from broker.runtime.wiring import Runtime
from broker.store.db import transaction
from broker.store.models import (
    Bookmark,
    BookmarkQueueItem,
    InstanceStatus,
    InstanceSubStatus,
    Request,
    RequestEvent,
    RequestStatus,
    StepResult,
    WorkflowInstance,
    table_of,
    utcnow,
)

logger = logging.getLogger(__name__)

#: the audit event of an accepted remote callback
CALLBACK_RECEIVED = "CallbackReceived"
#: how long a task waits for an instance another worker holds, before postponing its row
LOCK_WAIT_SECONDS = 5.0
#: when postponed, the row is published again after this many seconds
BUSY_DELAY_SECONDS = 1.0


#: a request's instance row, written by its ``Opening`` (built once, see ``table_of``)
_INSERT_INSTANCE = insert(table_of(WorkflowInstance))
#: seconds a request's first step may run before its start is written on its own (``Opening``)
OPEN_DELAY_SECONDS = 0.2


@dataclasses.dataclass(frozen=True)
class Step:
    """One engine call and the target it saves to; ``open`` writes what must exist before the
    step's result can be saved (a request's first step: see ``Opening``)."""

    target: Target
    run: Callable[[Engine], Any]
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


# Entry points (one per task) ----------------------------------------------------------------------


class _Divert(Exception):
    """Raised by a plan when the request does not run here: its planning transaction is rolled
    back, the lock released, and the caller handles it outside both."""

    def __init__(self, request_type: str, submitted_at: Any, version_id: str | None) -> None:
        super().__init__(version_id)
        self.request_type, self.submitted_at, self.version_id = (
            request_type,
            submitted_at,
            version_id,
        )


BULK_DISPATCH = "Elsa.BulkDispatchWorkflows"


def run_request(rt: Runtime, request_id: str, outbox_id: str | None) -> Outcome:
    """Start the workflow of a request (``broker.run_request``).

    The request is read once, in the planning transaction under the instance lock: a request whose
    version is unknown (faulted) or that runs on a remote executor leaves it through ``_Divert``.
    """
    instance_id = ids.instance_id_for_request(request_id)

    def plan(session: Session, instance: WorkflowInstance | None) -> Step | None:
        if instance is not None and instance.checkpoint > 0:
            return None  # the first step was saved by an earlier delivery
        request = session.get(Request, request_id)
        if request is None or RequestStatus(request.status).terminal:
            return None
        # A request a trigger started carries the trigger and its correlation id.
        pending = session.get(StepResult, (instance_id, PENDING_START))
        start = dict(pending.output or {}) if pending is not None else {}
        correlation_id = str(start.get("correlationId") or request_id)
        trigger = start.get("trigger")
        version_id = request.definition_version_id
        published = rt.registry.get_version(version_id) if version_id else None
        if published is None or published.executor == "elsa":
            raise _Divert(request.request_type, request.submitted_at, version_id)
        open_: Callable[[Session], bool] | None = None
        if instance is None:
            # Written by ``Opening``: the row exists from then on, so it heartbeats and recovery
            # sees it; a delivery that finds it at checkpoint 0 redoes the step never saved.
            started = utcnow()

            def open_(s: Session) -> bool:
                if not start_processing(s, request_id, instance_id, now=started):
                    return False
                s.execute(
                    _INSERT_INSTANCE,
                    {
                        "id": instance_id,
                        "definition_id": published.definition_id,
                        "definition_version_id": published.version_id,
                        "version": published.version,
                        "request_id": request_id,
                        "correlation_id": correlation_id,
                        "name": published.name,
                        "status": InstanceStatus.RUNNING.value,
                        "sub_status": InstanceSubStatus.EXECUTING.value,
                        "checkpoint": 0,
                        "heartbeat_at": utcnow(),
                        "created_at": started,
                        "updated_at": started,
                    },
                )
                return True

        else:
            start_processing(session, request_id, instance_id)
        definition = rt.definitions.parse(published)
        target = Target(
            instance_id=instance_id,
            definition_id=published.definition_id,
            version_id=published.version_id,
            version=published.version,
            queue=published.queue,
            workflow_properties=dict(published.document.get("customProperties") or {}),
            expected_checkpoint=0,
            request_id=request_id,
            client_key=request.client_key,
            correlation_id=correlation_id,
            name=published.name,
            request_type=request.request_type,
            submitted_at=request.submitted_at,
        )
        workflow_input = {"keys": dict(request.keys or {}), "payload": request.payload or {}}
        if trigger is not None:
            workflow_input = {}  # the trigger carries what started it (body, event payload)
        return Step(
            target,
            lambda engine: engine.start(
                definition,
                instance_id=instance_id,
                input=workflow_input,
                correlation_id=correlation_id,
                trigger=trigger,
            ),
            open=open_,
        )

    try:
        return advance(rt, instance_id, outbox_id, plan)
    except _Divert as divert:
        published = rt.registry.get_version(divert.version_id) if divert.version_id else None
        if published is not None:
            return dispatch_remote(rt, request_id, outbox_id, published)
        error = f"workflow version {divert.version_id!r} is unknown"
        if _fault_request(rt, request_id, outbox_id, error):
            metrics.record_finished(divert.request_type, RequestStatus.FAULTED, divert.submitted_at)
        return Outcome.DONE


def run_child(rt: Runtime, instance_id: str, outbox_id: str | None) -> Outcome:
    """Start an instance waiting at checkpoint 0 with its start parameters: a child dispatched by
    DispatchWorkflow, or an instance a console user started (``broker.run_child``)."""

    def plan(session: Session, instance: WorkflowInstance | None) -> Step | None:
        if instance is None or instance.checkpoint != 0:
            return None
        if instance.status != InstanceStatus.RUNNING.value:
            return None  # cancelled (with its parent) before its first step ran
        pending = session.get(StepResult, (instance_id, PENDING_START))
        start = dict(pending.output or {}) if pending is not None else {}
        # A dispatched child runs the definition's current version; an instance started from the
        # console is pinned to the version its user chose.
        pinned = instance.definition_version_id
        published = (
            rt.registry.get_version(pinned)
            if pinned
            else rt.registry.get_definition(instance.definition_id)
        )
        if published is None:
            raise NotFound(f"workflow {instance.definition_id!r} ({pinned}) is not loaded")
        definition = rt.definitions.parse(published)
        target = _target_for(instance, published, client_key=start.get("clientKey"))
        return Step(
            dataclasses.replace(target, expected_checkpoint=0),
            lambda engine: engine.start(
                definition,
                instance_id=instance_id,
                input=start.get("input") or {},
                correlation_id=start.get("correlationId"),
                parent_id=start.get("parentId"),
            ),
        )

    return advance(rt, instance_id, outbox_id, plan)


def resume_instance(
    rt: Runtime,
    instance_id: str,
    outbox_id: str | None,
    *,
    bookmark_id: str | None = None,
    queue_item_id: str | None = None,
    retry: int | None = None,
) -> Outcome:
    """Resume a bookmark with a queued stimulus, or run a failed activity again
    (``broker.resume_instance``)."""

    def plan(session: Session, instance: WorkflowInstance | None) -> Step | None:
        if instance is None or instance.status != InstanceStatus.RUNNING.value:
            return None
        if instance.state is None:
            return None
        published = rt.registry.get_version(instance.definition_version_id)
        if published is None:
            raise NotFound(f"workflow version {instance.definition_version_id!r} is not loaded")
        request = session.get(Request, instance.request_id) if instance.request_id else None
        if request is not None and RequestStatus(request.status).terminal:
            return None
        target = _target_for(instance, published, client_key=None, request=request)
        state = dict(instance.state)
        if retry is not None:
            return Step(dataclasses.replace(target, attempt=retry), lambda e: e.retry(state))
        if bookmark_id is None or session.get(Bookmark, bookmark_id) is None:
            return None  # resumed already (a duplicate stimulus), or never suspended there
        item = session.get(BookmarkQueueItem, queue_item_id) if queue_item_id else None
        stimulus = item.payload if item is not None else None
        options = (item.options or {}) if item is not None else {}
        bookmark = session.get(Bookmark, bookmark_id)
        if bookmark is not None and bookmark.name == BULK_DISPATCH and "childSubStatus" in options:
            # Elsa's child-completed input: BulkDispatchWorkflows picks its port by sub-status.
            stimulus = {
                "WorkflowInstanceId": options.get("childInstanceId"),
                "WorkflowSubStatus": options["childSubStatus"],
                "WorkflowOutput": item.payload if item is not None else None,
            }
        return Step(target, lambda e: e.resume(state, bookmark_id=bookmark_id, input=stimulus))

    return advance(rt, instance_id, outbox_id, plan, consumed_item=queue_item_id)


def _target_for(
    instance: WorkflowInstance,
    published: Any,
    *,
    client_key: str | None,
    request: Request | None = None,
) -> Target:
    """The target of a step on a saved instance; ``request`` is the one it serves, if any."""
    return Target(
        instance_id=instance.id,
        definition_id=published.definition_id,
        version_id=published.version_id,
        version=published.version,
        queue=published.queue,
        workflow_properties=dict(published.document.get("customProperties") or {}),
        expected_checkpoint=instance.checkpoint,
        request_id=instance.request_id,
        client_key=request.client_key if request is not None else client_key,
        parent_id=instance.parent_id,
        correlation_id=instance.correlation_id,
        name=instance.name,
        request_type=request.request_type if request is not None else None,
        submitted_at=request.submitted_at if request is not None else None,
    )


# The common path ----------------------------------------------------------------------------------


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


def _run_step(step: Step, engine: Engine) -> Any:
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


def _record_step(target: Target, saved: Saved, result: Any) -> None:
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
    lock: Any,
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


def _fault_request(rt: Runtime, request_id: str, outbox_id: str | None, error: str) -> bool:
    """Fault a request that cannot run; answers whether this call moved it to Faulted."""
    with transaction(rt.factory) as session:
        set_to = finish_request(session, request_id, sub_status="Faulted", output=None, error=error)
        outbox.mark_done(session, outbox_id)
    logger.error("request %s faulted: %s", request_id, error, extra={"request_id": request_id})
    return set_to is not None


# Remote results -----------------------------------------------------------------------------------


def complete_from_callback(
    session: Session,
    request_id: str,
    status: str,
    result: Any,
    error: str | None,
    *,
    attempt: int | None = None,
    webhook_id: str | None = None,
) -> Request:
    """Finish a remotely executed request from the executor's callback, in the caller's
    transaction. ``NotFound`` for an unknown request, ``Conflict`` (409) when it is already
    terminal (a late or duplicate callback changes nothing), ``BadRequest`` for a bad status.

    The internal listener passes the dispatch ``attempt`` the callback's signature was verified
    for and its ``webhook_id``: ``Unauthenticated`` when the request has been dispatched again
    since, or when a callback with that id was already accepted (a replay). The id is kept in the
    CallbackReceived audit event."""
    if status not in (RequestStatus.COMPLETED.value, RequestStatus.FAULTED.value):
        raise BadRequest("status must be Completed or Faulted", field="status")
    request = session.get(Request, request_id)
    if request is None:
        raise NotFound(f"Request '{request_id}' not found")
    if attempt is not None and request.remote_attempt != attempt:
        raise Unauthenticated("Callback of an earlier dispatch attempt")
    if webhook_id is not None and webhook_id in accepted_webhook_ids(session, request_id):
        raise Unauthenticated("Callback already received (replayed webhook-id)")
    now = utcnow()
    sub_status = "Finished" if status == RequestStatus.COMPLETED.value else "Faulted"
    set_to = finish_request(
        session,
        request_id,
        sub_status=sub_status,
        output=result,
        error=error,
        now=now,
        source="callback",
    )
    if set_to is None:
        session.refresh(request)
        raise Conflict(f"Request '{request_id}' is already {request.status}", status=request.status)
    session.add(
        RequestEvent(
            request_id=request_id,
            timestamp=now,
            event_type=CALLBACK_RECEIVED,
            source="callback",
            message=f"Remote executor reported {status}",
            properties={"status": status, "attempt": attempt, "webhookId": webhook_id},
        )
    )
    session.flush()
    session.refresh(request)
    return request


def accepted_webhook_ids(session: Session, request_id: str) -> set[str]:
    """The ``webhook-id`` of every callback accepted for ``request_id`` (at most one per dispatch
    attempt, as an accepted callback finishes the request)."""
    found = session.scalars(
        select(RequestEvent.properties).where(
            RequestEvent.request_id == request_id,
            RequestEvent.event_type == CALLBACK_RECEIVED,
        )
    )
    return {str(p["webhookId"]) for p in found if p and p.get("webhookId")}

"""Running workflow instances: the entry points (start a request, start a child, resume or retry
an instance), one per task, each planning one engine step from what is saved."""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging

from sqlalchemy.orm import Session

from broker.engine.model.definition import WorkflowDefinition
from broker.errors import NotFound, WorkflowDefinitionError
from broker.registry.versions import PublishedWorkflow
from broker.runtime import ids
from broker.runtime.failures import dead_letters
from broker.runtime.outbox import rows as outbox
from broker.runtime.outbox.outcome import Outcome
from broker.runtime.parts import Steps
from broker.runtime.persist import Start, Target
from broker.runtime.requests.transitions import finish_request, start_processing
from broker.runtime.steps import ceiling
from broker.runtime.steps.remote import dispatch_remote
from broker.runtime.steps.step import Reads, Step, advance
from broker.store.db import begin_writing, transaction
from broker.store.models import (
    Bookmark,
    BookmarkQueueItem,
    InstanceStatus,
    InstanceSubStatus,
    Request,
    RequestStatus,
    WorkflowInstance,
    utcnow,
)
from broker.telemetry import metrics

logger = logging.getLogger(__name__)


# Entry points (one per task) ----------------------------------------------------------------------


class _Divert(Exception):
    """Raised by a plan when the request does not run here: its planning transaction is rolled
    back, the lock released, and the caller handles it outside both."""

    def __init__(
        self, request_type: str, submitted_at: dt.datetime, version_id: str | None
    ) -> None:
        super().__init__(version_id)
        self.request_type, self.submitted_at, self.version_id = (
            request_type,
            submitted_at,
            version_id,
        )


class _Unloadable(Exception):
    """Raised by a plan when the definition its step needs cannot be loaded (it nests too deep,
    it no longer validates): the work faults with the reason, once, instead of failing again on
    every delivery while every other request runs."""

    def __init__(self, error: WorkflowDefinitionError, what: str, queue: str | None) -> None:
        super().__init__(error.message)
        self.message = f"{what} cannot be loaded: {error.path}: {error.reason}"
        self.queue = queue


#: the fault's code (and the dead letter's reason) of work whose definition cannot be loaded
UNLOADABLE = "WorkflowDefinitionUnloadable"

BULK_DISPATCH = "Elsa.BulkDispatchWorkflows"


def _version(rt: Steps, version_id: str) -> PublishedWorkflow | None:
    """A stored version of a step, or ``_Unloadable`` when its document cannot be read back."""
    try:
        return rt.registry.get_version(version_id)
    except WorkflowDefinitionError as exc:
        raise _Unloadable(exc, f"workflow version {version_id!r}", None) from exc


def _parse(rt: Steps, published: PublishedWorkflow) -> WorkflowDefinition:
    """The parsed definition of a step, or ``_Unloadable`` naming why it cannot be loaded."""
    try:
        return rt.definitions.parse(published)
    except WorkflowDefinitionError as exc:
        what = f"workflow {published.definition_id!r} version {published.version}"
        raise _Unloadable(exc, what, published.queue) from exc


def _fault_unloadable(
    rt: Steps,
    unloadable: _Unloadable,
    *,
    instance_id: str,
    outbox_id: str | None,
    request_id: str | None = None,
) -> Outcome:
    """Fault the work of a step whose definition cannot be loaded (its instance, its request,
    a dead letter naming the reason): replayable once the definition loads again."""
    with transaction(rt.factory) as session:
        ceiling.fault_overdue_step_txn(
            session,
            limit=rt.settings.step_time_limit,
            instance_id=instance_id,
            outbox_id=outbox_id,
            request_id=request_id,
            queue=unloadable.queue,
            code=UNLOADABLE,
            category="Definition",
            message=unloadable.message,
        )
    return Outcome.DONE


def run_request(rt: Steps, request_id: str, outbox_id: str | None) -> Outcome:
    """Start the workflow of a request (``broker.run_request``).

    The request is read once, with the rest of the plan's reads under the instance lock: a request
    whose version is unknown (faulted) or that runs on a remote executor leaves the step's
    transaction through ``_Divert``.
    """
    instance_id = ids.instance_id_for_request(request_id)

    def plan(session: Session, reads: Reads) -> Step | None:
        instance, request = reads.instance, reads.request
        if instance is not None and instance.checkpoint > 0:
            return None  # the first step was saved by an earlier delivery
        if request is None or RequestStatus(request.status).terminal:
            return None
        # A request a trigger started carries the trigger and its correlation id.
        pending = reads.pending
        start = dict(pending.output or {}) if pending is not None else {}
        correlation_id = str(start.get("correlationId") or request_id)
        trigger = start.get("trigger")
        version_id = request.definition_version_id
        published = _version(rt, version_id) if version_id else None
        if published is None or published.executor == "elsa":
            raise _Divert(request.request_type, request.submitted_at, version_id)
        opening: Start | None = None
        if instance is None:
            # Written by the heartbeat if the step runs long (the row exists from then on, so it
            # heartbeats and recovery sees it; a delivery that finds it at checkpoint 0 redoes
            # the step never saved), else by the step's save, in its final state.
            started = utcnow()
            first = Start(
                request_id=request_id,
                row={
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
                    "created_at": started,
                    "updated_at": started,
                },
                started=started,
            )
            if request.status == RequestStatus.QUEUED.value:
                opening = first
            else:
                # A replay reopened a request that faulted before anything of its first step
                # was written (its worker died at once): write the instance now, committed
                # before the engine runs, as a long first step's heartbeat would have.
                begin_writing(session)
                session.add(WorkflowInstance(**first.row, heartbeat_at=started))
                session.commit()
        elif request.status == RequestStatus.QUEUED.value:
            # An instance opened without its request (not written by this runtime): open the
            # request now, committed before the engine runs, as the start would have been.
            begin_writing(session)
            start_processing(session, request_id, instance_id)
            session.commit()
        definition = _parse(rt, published)
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
        # A submission is the HTTP request the workflow answers (WriteHttpResponse: the result).
        options = {"httpContext": {"id": request_id, "source": "request"}}
        if trigger is not None:
            workflow_input = {}  # the trigger carries what started it (body, event payload)
            options = {}  # an HTTP trigger brings its own request; an event or timer none
        return Step(
            target,
            lambda engine: engine.start(
                definition,
                instance_id=instance_id,
                input=workflow_input,
                correlation_id=correlation_id,
                trigger=trigger,
                options=options,
            ),
            start=opening,
        )

    try:
        return advance(rt, instance_id, outbox_id, plan, request_id=request_id)
    except _Unloadable as unloadable:
        return _fault_unloadable(
            rt, unloadable, instance_id=instance_id, outbox_id=outbox_id, request_id=request_id
        )
    except _Divert as divert:
        published = rt.registry.get_version(divert.version_id) if divert.version_id else None
        if published is not None:
            return dispatch_remote(rt, request_id, outbox_id, published)
        error = f"workflow version {divert.version_id!r} is unknown"
        if _fault_request(rt, request_id, outbox_id, error):
            metrics.record_finished(divert.request_type, RequestStatus.FAULTED, divert.submitted_at)
        return Outcome.DONE


def run_child(rt: Steps, instance_id: str, outbox_id: str | None) -> Outcome:
    """Start an instance waiting at checkpoint 0 with its start parameters: a child dispatched by
    DispatchWorkflow, or an instance a console user started (``broker.run_child``)."""

    def plan(session: Session, reads: Reads) -> Step | None:
        instance = reads.instance
        if instance is None or instance.checkpoint != 0:
            return None
        if instance.status != InstanceStatus.RUNNING.value:
            return None  # cancelled (with its parent) before its first step ran
        pending = reads.pending
        start = dict(pending.output or {}) if pending is not None else {}
        # A dispatched child runs the definition's current version; an instance started from the
        # console is pinned to the version its user chose.
        pinned = instance.definition_version_id
        published = (
            _version(rt, pinned) if pinned else rt.registry.get_definition(instance.definition_id)
        )
        if published is None:
            raise NotFound(f"workflow {instance.definition_id!r} ({pinned}) is not loaded")
        definition = _parse(rt, published)
        target = _target_for(instance, published, client_key=start.get("clientKey"))
        return Step(
            dataclasses.replace(target, expected_checkpoint=0),
            lambda engine: engine.start(
                definition,
                instance_id=instance_id,
                input=start.get("input") or {},
                correlation_id=start.get("correlationId"),
                parent_id=start.get("parentId"),
                options={"properties": start.get("properties") or {}},
                # the name its starter gave (the console's execute/dispatch), kept as Elsa does
                name=instance.name,
            ),
        )

    try:
        return advance(rt, instance_id, outbox_id, plan)
    except _Unloadable as unloadable:
        return _fault_unloadable(rt, unloadable, instance_id=instance_id, outbox_id=outbox_id)


def resume_instance(
    rt: Steps,
    instance_id: str,
    outbox_id: str | None,
    *,
    bookmark_id: str | None = None,
    queue_item_id: str | None = None,
    retry: int | None = None,
) -> Outcome:
    """Resume a bookmark with a queued stimulus, or run a failed activity again
    (``broker.resume_instance``)."""

    def plan(session: Session, reads: Reads) -> Step | None:
        instance = reads.instance
        if instance is None or instance.status != InstanceStatus.RUNNING.value:
            return None
        if instance.state is None:
            return None
        published = _version(rt, instance.definition_version_id)
        if published is None:
            raise NotFound(f"workflow version {instance.definition_version_id!r} is not loaded")
        request = reads.request
        if request is not None and RequestStatus(request.status).terminal:
            return None
        _parse(rt, published)  # the engine parses it again from the cache
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

    try:
        return advance(rt, instance_id, outbox_id, plan, consumed_item=queue_item_id)
    except _Unloadable as unloadable:
        return _fault_unloadable(rt, unloadable, instance_id=instance_id, outbox_id=outbox_id)


def _target_for(
    instance: WorkflowInstance,
    published: PublishedWorkflow,
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


def _fault_request(rt: Steps, request_id: str, outbox_id: str | None, error: str) -> bool:
    """Fault a request that cannot run; answers whether this call moved it to Faulted."""
    with transaction(rt.factory) as session:
        set_to = finish_request(session, request_id, sub_status="Faulted", output=None, error=error)
        if set_to is not None:
            # Replayable once the workflow is loaded again: the replay starts the request anew.
            dead_letters.record_fault(
                session,
                key=f"start:{request_id}:{outbox_id}",
                reason=dead_letters.FAULTED,
                error=error,
                request_id=request_id,
                instance_id=None,
                source_id=outbox_id,
            )
        outbox.mark_done(session, outbox_id)
    logger.error("request %s faulted: %s", request_id, error, extra={"request_id": request_id})
    return set_to is not None

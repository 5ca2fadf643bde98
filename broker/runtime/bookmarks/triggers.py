"""Triggers start workflows: an event, a schedule or an HTTP call becomes a new request."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy import insert, select
from sqlalchemy.orm import Session

from broker.errors import ActivationRefused
from broker.names import DEFAULT_QUEUE, EVENT, RUN_REQUEST, SCHEDULED
from broker.registry.triggers import index_triggers
from broker.runtime import ids
from broker.runtime.ids import PENDING_START
from broker.runtime.outbox import rows as outbox
from broker.runtime.requests import transitions as statuses
from broker.runtime.requests.activation import check_activation
from broker.store.models import (
    BookmarkQueueItem,
    Request,
    RequestTypeRule,
    StepResult,
    WorkflowInstance,
    utcnow,
)
from broker.store.models import Trigger as TriggerRow

logger = logging.getLogger(__name__)

#: The owner of the requests schedules start (and events published by a workflow without one).
SYSTEM_CLIENT = "system"


@dataclasses.dataclass(frozen=True)
class Start:
    """One trigger firing: what to start, for whom, and the key that makes it happen once."""

    workflow: Any  # the registry's PublishedWorkflow of the current version
    activity_id: str
    trigger_name: str
    client_id: str
    key: tuple[str, ...]  # derives the request id
    payload: Any = None
    keys: Mapping[str, str] = dataclasses.field(default_factory=dict)  # the request's keys
    correlation_id: str | None = None
    trigger: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # for the engine
    source: str = "trigger"


def request_id_for(start: Start) -> str:
    return ids.derive("trigger-request", *start.key)


def start_workflow(
    session: Session, start: Start, *, refuse: bool = False
) -> tuple[str, str] | None:
    """Record the request, its audit event, the trigger for the engine and the outbox row.

    Answers ``(request id, outbox id)``, or None when this firing started its instance already
    or the workflow's activation strategy forbids a new one now (with ``refuse``, that raises
    ``ActivationRefused`` for a caller waiting on an answer). Never commits.
    """
    workflow = start.workflow
    request_id = request_id_for(start)
    if session.get(Request, request_id) is not None:
        return None
    correlation_id = start.correlation_id or request_id
    try:
        check_activation(
            session,
            definition_id=workflow.definition_id,
            strategy=workflow.activation_strategy,
            correlation_id=correlation_id,
        )
    except ActivationRefused as exc:
        if refuse:
            raise
        logger.warning(
            "trigger %s of %s not started: %s",
            start.activity_id,
            workflow.definition_id,
            exc.message,
            extra={"definition_id": workflow.definition_id},
        )
        return None
    now = utcnow()
    request_type = workflow.request_type or workflow.definition_id
    session.execute(
        insert(Request).values(
            id=request_id,
            client_id=start.client_id,
            client_key=start.client_id.lower(),
            request_type=request_type,
            request_type_key=request_type.lower(),
            keys=dict(start.keys),
            payload=start.payload if isinstance(start.payload, dict) else None,
            status=statuses.INITIAL.value,
            definition_id=workflow.definition_id,
            definition_version=workflow.version,
            definition_version_id=workflow.version_id,
            submitted_at=now,
            updated_at=now,
        )
    )
    statuses.note(
        session,
        request_id,
        statuses.SUBMITTED_EVENT,
        source=start.source,
        message=f"Started by trigger {start.trigger_name} ({start.activity_id})",
        properties={
            "requestType": request_type,
            "definitionId": workflow.definition_id,
            "version": workflow.version,
            "trigger": start.trigger_name,
            "activityId": start.activity_id,
            "correlationId": correlation_id,
        },
        now=now,
    )
    instance_id = ids.instance_id_for_request(request_id)
    trigger = {"activityId": start.activity_id, **start.trigger}
    if start.payload is not None:
        trigger.setdefault("payload", start.payload)
    session.add(
        StepResult(
            instance_id=instance_id,
            step_key=PENDING_START,
            output={"trigger": trigger, "correlationId": correlation_id, "requestId": request_id},
            created_at=now,
        )
    )
    row = outbox.enqueue(
        session,
        outbox_id=ids.outbox_id_for("trigger", request_id),
        task_name=RUN_REQUEST,
        queue=workflow.queue or DEFAULT_QUEUE,
        args={"request_id": request_id},
        request_id=request_id,
        available_at=now,
    )
    logger.info(
        "trigger %s (%s) of %s started request %s for %s",
        start.trigger_name,
        start.activity_id,
        workflow.definition_id,
        request_id,
        start.client_id,
        extra={"request_id": request_id, "client_id": start.client_id},
    )
    return request_id, row.id


def may_submit(session: Session, client_id: str, request_type: str | None) -> bool:
    """Whether an event from ``client_id`` may start ``request_type`` (its database rule, with no
    required keys)."""
    if not request_type:
        return False
    rule = session.scalars(
        select(RequestTypeRule).where(
            RequestTypeRule.client_key == client_id.lower(),
            RequestTypeRule.request_type_key == request_type.lower(),
        )
    ).first()
    return rule is not None and rule.enabled and not rule.required_keys


def event_matches(payload: Mapping[str, Any] | None, name: str | None) -> bool:
    """Whether an Event bookmark's or trigger's ``payload`` waits for the event ``name``
    (case-insensitive). A payload without a name (missing, null, empty, not text) matches no
    event, and an event without a name matches nothing."""
    wanted = (payload or {}).get("eventName")
    if not isinstance(wanted, str) or not wanted or not name:
        return False
    return wanted.lower() == name.lower()


def current_triggers(
    session: Session, registry: Any, name: str
) -> Iterable[tuple[Any, TriggerRow]]:
    """(current version, trigger row) of every loaded workflow with a trigger named ``name``.

    Only the version the registry serves counts: a new version's triggers replace the old ones,
    and a definition whose file was removed has none.
    """
    rows = session.scalars(
        select(TriggerRow).where(TriggerRow.name == name).order_by(TriggerRow.definition_id)
    )
    for row in rows:
        current = registry.get_definition(row.definition_id) if registry is not None else None
        if current is not None and current.version_id == row.definition_version_id:
            yield current, row


def http_response(session: Session, request_id: str) -> tuple[dict[str, Any] | None, bool]:
    """(the response an HttpEndpoint-started request's instance saved, or None; whether to stop
    waiting for one: the instance finished or suspended without one (it waits for something
    else first: the call is answered now, as Elsa's is), or the request is terminal)."""
    found = session.execute(
        select(WorkflowInstance.state, WorkflowInstance.status, WorkflowInstance.sub_status).where(
            WorkflowInstance.id == ids.instance_id_for_request(request_id)
        )
    ).first()
    status = session.scalar(select(Request.status).where(Request.id == request_id))
    if found is not None:
        state, instance_status, sub_status = found
        response = (state or {}).get("httpResponse")
        if response:
            return response, True
        if instance_status == "Finished" or sub_status == "Suspended":
            return None, True
    return None, status in statuses.TERMINAL


def event_starts(
    session: Session, item: BookmarkQueueItem, registry: Any, clients: Any = None
) -> list[str]:
    """Start the workflows whose Event trigger matches a queued event (or, for an item with a
    stimulus hash such as a webhook event, whose trigger of the item's name has that hash);
    answers outbox row ids.

    An event a client sent starts only the workflows it may submit (``clients``: the merged
    allowlist, ``broker.clients.registry.ClientRegistry``; without it the database rows alone);
    one a workflow published (``options.publishedBy``) starts every match, owned by the publishing
    request's client.
    """
    if item.bookmark_id is not None or item.instance_id is not None:
        return []  # addressed to one bookmark, or a local event: never a trigger
    options = item.options or {}
    published_by = options.get("publishedBy")
    written: list[str] = []
    name = item.name if item.hash is not None else EVENT
    for current, row in current_triggers(session, registry, name):
        if item.hash is not None and row.hash != item.hash:
            continue
        if item.hash is None and not event_matches(row.payload, item.name):
            continue
        if published_by is not None:
            client_id = str(options.get("clientId") or SYSTEM_CLIENT)
            source = "workflow"
        else:
            sender = _client_id(session, item.client_key, clients)
            if sender is None or not _permitted(session, clients, sender, current.request_type):
                logger.info(
                    "event %s does not start %s: its sender may not submit %s",
                    item.name,
                    current.definition_id,
                    current.request_type,
                    extra={"queue_item_id": item.id},
                )
                continue
            client_id, source = sender, "ingress"
        started = start_workflow(
            session,
            Start(
                workflow=current,
                activity_id=row.activity_id,
                trigger_name=name,
                client_id=client_id,
                key=("event", item.id, current.definition_id, row.activity_id),
                payload=item.payload,
                correlation_id=item.correlation_id,
                source=source,
            ),
        )
        if started is not None:
            written.append(started[1])
    return written


def _permitted(session: Session, clients: Any, client_id: str, request_type: str | None) -> bool:
    """The sender may submit the request type, and its rule requires no keys (an event carries
    none, and a request of that type must have them)."""
    if clients is None:
        return may_submit(session, client_id, request_type)
    rule = clients.rule_for(client_id, request_type) if request_type else None
    return rule is not None and not rule.required_keys


def _client_id(session: Session, client_key: str | None, clients: Any = None) -> str | None:
    """The client id as registered, from its lower-cased key."""
    if client_key is None:
        return None
    if clients is not None:
        found = clients.get(client_key)
        return str(found.client_id) if found is not None else None
    return session.scalar(
        select(RequestTypeRule.client_id).where(RequestTypeRule.client_key == client_key).limit(1)
    )


def schedule_triggers(document: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """(activity id, trigger name, spec) of a document's Timer, Cron and StartAt triggers."""
    found = []
    for spec in index_triggers(document):
        if spec.payload is None:
            continue
        value = next(iter(spec.payload.values()))
        if spec.name in SCHEDULED:
            found.append((spec.activity_id, spec.name, str(value)))
    return found

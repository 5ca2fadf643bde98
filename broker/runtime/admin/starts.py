"""Starting a workflow by hand, for a console user (Elsa's execute and dispatch)."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from typing import Any

from sqlalchemy.orm import Session

from broker.errors import BadRequest, Conflict, RuntimePaused
from broker.names import DEFAULT_QUEUE, RUN_CHILD
from broker.runtime import ids
from broker.runtime.outbox import rows as outbox
from broker.runtime.outbox.pause import is_paused_cached
from broker.runtime.persist import add_pending_instance
from broker.runtime.ports import OutboxMessage, PinnedWorkflow, Publisher
from broker.runtime.requests.submission import Submission, submit
from broker.store.models import (
    WorkflowInstance,
    utcnow,
)

logger = logging.getLogger(__name__)

CONSOLE_CLIENT_PREFIX = "console:"
#: the fields a request-type workflow's input may have: the body of a submission
REQUEST_INPUT_FIELDS = frozenset({"keys", "payload"})
MAX_ID = 64  # the width of the id columns


@dataclasses.dataclass(frozen=True)
class Started:
    """A start recorded in the caller's transaction. After the commit the caller sends
    ``messages`` with ``Publisher.publish_new`` (a submission's row, inserted as dispatched) and
    ``pending`` with ``Publisher.publish``."""

    instance_id: str
    request_id: str | None
    messages: tuple[OutboxMessage, ...] = ()
    pending: tuple[str, ...] = ()

    def publish(self, publisher: Publisher) -> None:
        """The fast path, after commit; a failure is logged, the relay publishes the rows."""
        try:
            if self.messages:
                publisher.publish_new(self.messages)
            if self.pending:
                publisher.publish(self.pending)
        except Exception:
            logger.exception(
                "fast-path publish failed for instance %s; the relay will retry",
                self.instance_id,
                extra={"instance_id": self.instance_id, "request_id": self.request_id},
            )


def console_client_id(user: str) -> str:
    """The client id of the requests a console user starts."""
    return CONSOLE_CLIENT_PREFIX + user


def request_input(value: Any) -> tuple[dict[str, str], dict[str, Any] | None]:
    """The keys and payload of a request-type workflow's input (``{"keys", "payload"}``)."""
    if value is None:
        return {}, None
    if not isinstance(value, dict):
        raise BadRequest("'input' must be a JSON object", field="input")
    unknown = sorted(set(value) - REQUEST_INPUT_FIELDS)
    if unknown:
        raise BadRequest(
            "'input' of a request-type workflow has only 'keys' and 'payload' "
            f"(as a submission); unknown: {', '.join(unknown)}",
            field="input",
        )
    keys = value.get("keys") or {}
    if not isinstance(keys, dict) or not all(isinstance(v, str) for v in keys.values()):
        raise BadRequest("'input.keys' must be a JSON object of string values", field="input.keys")
    payload = value.get("payload")
    if payload is not None and not isinstance(payload, dict):
        raise BadRequest("'input.payload' must be a JSON object", field="input.payload")
    return dict(keys), payload


def start_request_txn(
    session: Session,
    *,
    user: str,
    request_type: str,
    workflow: PinnedWorkflow,
    input: Any,
    dispatch_lease: float | None = None,
) -> Started:
    """Record a request of ``request_type`` owned by console user ``user``, pinned to
    ``workflow``; ``input`` is ``{"keys": {...}, "payload": {...}}``."""
    keys, payload = request_input(input)
    submitted = submit(
        session,
        client_id=console_client_id(user),
        submission=Submission(request_type=request_type, keys=keys, payload=payload),
        workflow=workflow,
        dispatch_lease=dispatch_lease,
        source="console",
    )
    return Started(
        ids.instance_id_for_request(submitted.request_id),
        submitted.request_id,
        messages=submitted.messages,
    )


def start_instance_txn(
    session: Session,
    *,
    user: str,
    workflow: PinnedWorkflow,
    name: str | None,
    instance_id: str | None = None,
    input: Mapping[str, Any] | None = None,
    correlation_id: str | None = None,
) -> Started:
    """Record a new instance of ``workflow`` (not a request) started by console user ``user``,
    and the outbox row that runs its first step."""
    if is_paused_cached(session):
        raise RuntimePaused("The workflow runtime is paused; try again later")
    instance_id = instance_id or ids.new_id()
    if len(instance_id) > MAX_ID:
        raise BadRequest(f"'instanceId' is longer than {MAX_ID} characters", field="instanceId")
    if session.get(WorkflowInstance, instance_id) is not None:
        raise Conflict(f"Workflow instance '{instance_id}' already exists", instanceId=instance_id)
    now = utcnow()
    client_key = console_client_id(user).lower()
    instance = WorkflowInstance(
        id=instance_id,
        definition_id=workflow.definition_id,
        definition_version_id=workflow.version_id,
        version=workflow.version,
        request_id=None,
        parent_id=None,
        correlation_id=correlation_id,
        name=name,
    )
    start = {
        "input": dict(input or {}),
        "correlationId": correlation_id,
        "parentId": None,
        "clientKey": client_key,
        "startedBy": user,
    }
    add_pending_instance(session, instance, start, now)
    row = outbox.enqueue(
        session,
        outbox_id=ids.outbox_id_for("console-start", instance_id),
        task_name=RUN_CHILD,
        queue=workflow.queue or DEFAULT_QUEUE,
        args={"instance_id": instance_id},
        instance_id=instance_id,
    )
    logger.info(
        "instance %s of %s v%d started by console user %s",
        instance_id,
        workflow.definition_id,
        workflow.version,
        user,
        extra={"instance_id": instance_id},
    )
    return Started(instance_id, None, pending=(row.id,))

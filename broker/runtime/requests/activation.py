"""Elsa's workflow activation strategies: may a new instance of a workflow start now?"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from broker.errors import ActivationRefused
from broker.runtime import ids
from broker.runtime.ids import PENDING_START
from broker.store.models import (
    InstanceStatus,
    Request,
    RequestStatus,
    StepResult,
    WorkflowDefinition,
)
from broker.store.models import WorkflowInstance as Instance

STRATEGIES = ("always", "singleton", "correlation", "correlated-singleton")
_ACTIVE = (RequestStatus.QUEUED.value, RequestStatus.PROCESSING.value)


def pending_start(
    request_id: str, correlation_id: str, now: dt.datetime, **more: Any
) -> dict[str, Any]:
    """The pending-start row of a request's instance correlated with ``correlation_id`` (the
    first step reads it), naming its request so ``check_activation`` finds it while queued."""
    return {
        "instance_id": ids.instance_id_for_request(request_id),
        "step_key": PENDING_START,
        "output": {"correlationId": correlation_id, "requestId": request_id, **more},
        "created_at": now,
    }


def check_activation(
    session: Session, *, definition_id: str, strategy: str, correlation_id: str | None
) -> None:
    """Raise ``ActivationRefused`` when ``strategy`` forbids a new instance now.

    For ``singleton`` the definition's version rows are locked first (``FOR UPDATE`` where the
    database has it) so two concurrent starts are serialized and only one passes.
    """
    if strategy == "always":
        return
    by_definition = strategy in ("singleton", "correlated-singleton")
    by_correlation = strategy in ("correlation", "correlated-singleton") and bool(correlation_id)
    if by_definition:
        session.execute(
            select(WorkflowDefinition.id)
            .where(WorkflowDefinition.definition_id == definition_id)
            .with_for_update()
        ).all()
    instances = select(Instance.id).where(Instance.status == InstanceStatus.RUNNING.value)
    requests = select(Request.id).where(Request.status.in_(_ACTIVE))
    if by_definition:
        instances = instances.where(Instance.definition_id == definition_id)
        requests = requests.where(Request.definition_id == definition_id)
    if by_correlation:
        instances = instances.where(Instance.correlation_id == correlation_id)
        # An accepted request correlated so, whose instance does not exist yet: its own id, or
        # the correlation its pending start carries (``pending_start``).
        pending = select(StepResult.output["requestId"].as_string()).where(
            StepResult.step_key == PENDING_START,
            StepResult.output["correlationId"].as_string() == correlation_id,
        )
        requests = requests.where(Request.id.in_(pending) | (Request.id == correlation_id))
    running = session.scalar(instances.limit(1)) or session.scalar(requests.limit(1))
    if running is None:
        return
    what = {
        "singleton": f"workflow {definition_id!r} is a singleton",
        "correlation": f"a workflow with correlation id {correlation_id!r}",
        "correlated-singleton": (
            f"workflow {definition_id!r} with correlation id {correlation_id!r}"
        ),
    }[strategy]
    # The running instance may be another client's: its id is not disclosed.
    raise ActivationRefused(
        f"{what} is already running; options.activationStrategyType forbids another instance",
        definitionId=definition_id,
        activationStrategy=strategy,
    )

"""Elsa's alteration plans: ``submit`` (alterations for the instances a filter selects, one job
each, run through ``alteration_jobs``), ``dry_run`` (which instances) and ``get`` (plan and jobs).
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Mapping
from typing import Any

from sqlalchemy import ColumnElement, select, update
from sqlalchemy.orm import Session

from broker.errors import BadRequest, Conflict, NotFound
from broker.runtime import ids
from broker.runtime.admin import alteration_jobs, alterations
from broker.runtime.parts import Alterations
from broker.store import operator_actions
from broker.store.db import transaction
from broker.store.models import AlterationPlan, WorkflowInstance, utcnow

logger = logging.getLogger(__name__)

#: the filter fields ``dry_run`` and ``submit`` understand (Elsa's
#: ``AlterationWorkflowInstanceFilter``); any other is refused
FILTER_FIELDS = (
    "workflowInstanceIds",
    "correlationIds",
    "names",
    "searchTerm",
    "definitionIds",
    "definitionVersionIds",
    "hasIncidents",
    "isSystem",
    "statuses",
    "subStatuses",
    "emptyFilterSelectsAll",
)


def parse_filter(raw: Any, field: str = "filter") -> dict[str, Any]:
    """Elsa's ``AlterationWorkflowInstanceFilter``, checked; unknown fields are refused."""
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise BadRequest(f"{field} must be an object", field=field)
    known = {f.lower(): f for f in FILTER_FIELDS}
    parsed: dict[str, Any] = {}
    for key, value in raw.items():
        name = known.get(str(key).lower())
        if name is None:
            raise BadRequest(
                f"{field}.{key} is not supported (supported: {', '.join(FILTER_FIELDS)})",
                field=f"{field}.{key}",
            )
        if value is None:
            continue
        if name in ("hasIncidents", "isSystem", "emptyFilterSelectsAll"):
            if not isinstance(value, bool):
                raise BadRequest(f"{field}.{name} must be true or false", field=f"{field}.{name}")
        elif name == "searchTerm":
            if not isinstance(value, str):
                raise BadRequest(f"{field}.{name} must be a string", field=f"{field}.{name}")
        elif not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise BadRequest(f"{field}.{name} must be a list of strings", field=f"{field}.{name}")
        parsed[name] = value
    return parsed


def dry_run(session: Session, raw_filter: Any) -> list[str]:
    """The ids of the instances a plan with this filter would alter (Elsa's ``dry-run``)."""
    wanted = parse_filter(raw_filter)
    table = WorkflowInstance
    where: list[ColumnElement[bool]] = []
    columns = {
        "workflowInstanceIds": table.id,
        "correlationIds": table.correlation_id,
        "names": table.name,
        "definitionIds": table.definition_id,
        "definitionVersionIds": table.definition_version_id,
        "statuses": table.status,
        "subStatuses": table.sub_status,
    }
    for name, column in columns.items():
        if name in wanted:
            where.append(column.in_(wanted[name]))
    if "searchTerm" in wanted:
        term = f"%{wanted['searchTerm']}%"
        where.append(
            table.name.ilike(term) | table.id.ilike(term) | table.correlation_id.ilike(term)
        )
    if "hasIncidents" in wanted:
        where.append(
            table.incident_count > 0 if wanted["hasIncidents"] else table.incident_count == 0
        )
    if not where and not wanted.get("emptyFilterSelectsAll"):
        return []
    return list(
        session.scalars(select(table.id).where(*where).order_by(table.created_at, table.id))
    )


@dataclasses.dataclass(frozen=True)
class Submitted:
    """A plan that ran: its id, and the outbox rows its jobs wrote (for the caller to publish)."""

    plan_id: str
    outbox_ids: list[str]


def submit(rt: Alterations, body: Any, *, actor: str) -> Submitted:
    """Record a plan (Elsa's ``AlterationPlanParams``: ``id``, ``alterations``, ``filter``) and
    run it on the instances its filter selects, one job each. The plan runs
    at once, in this call (Elsa runs it in the background); ``get`` shows its jobs."""
    if not isinstance(body, Mapping):
        raise BadRequest("the body must be an object", field="body")
    parsed = alterations.parse(body.get("alterations", body.get("Alterations")))
    raw_filter = body.get("filter", body.get("Filter"))
    filter_ = parse_filter(raw_filter)
    plan_id = body.get("id") or body.get("Id") or uuid.uuid4().hex
    if not isinstance(plan_id, str) or len(plan_id) > 64:
        raise BadRequest("id must be a string of at most 64 characters", field="id")
    now = utcnow()
    with transaction(rt.factory) as session:
        if session.get(AlterationPlan, plan_id) is not None:
            raise Conflict(f"Alteration plan '{plan_id}' exists already")
        session.add(
            AlterationPlan(
                id=plan_id,
                status="Running",
                alterations=parsed,
                filter=filter_,
                jobs=[],
                created_by=actor,
                created_at=now,
                started_at=now,
            )
        )
        targets = dry_run(session, filter_)
        operator_actions.record(
            session,
            actor=actor,
            action="alteration.submit",
            target=plan_id,
            summary={"alterations": alterations.summary(parsed), "instances": len(targets)},
        )
    jobs: list[dict[str, Any]] = []
    outbox_ids: list[str] = []
    for instance_id in targets:
        started = utcnow()
        result = alteration_jobs.run_one(
            rt, instance_id, parsed, actor=actor, plan_id=plan_id, kind="plan"
        )
        outbox_ids += result.outbox_ids
        jobs.append(
            {
                "id": ids.derive("alteration-job", plan_id, instance_id),
                "planId": plan_id,
                "workflowInstanceId": instance_id,
                "status": "Failed" if result.log.failed else "Completed",
                "log": result.log.entries,
                "createdAt": alterations.iso(started),
                "startedAt": alterations.iso(started),
                "completedAt": alterations.iso(utcnow()),
            }
        )
    with transaction(rt.factory) as session:
        session.execute(
            update(AlterationPlan)
            .where(AlterationPlan.id == plan_id)
            .values(status="Completed", jobs=jobs, completed_at=utcnow())
        )
    logger.warning("alteration plan %s by %s ran on %d instances", plan_id, actor, len(jobs))
    return Submitted(plan_id, outbox_ids)


def get(session: Session, plan_id: str) -> dict[str, Any]:
    """Elsa's ``alterations/{id}`` answer: ``{plan, jobs}``."""
    plan = session.get(AlterationPlan, plan_id)
    if plan is None:
        raise NotFound(f"Alteration plan '{plan_id}' not found")
    return {
        "plan": {
            "id": plan.id,
            "alterations": plan.alterations,
            "workflowInstanceFilter": plan.filter,
            "status": plan.status,
            "createdAt": alterations.iso(plan.created_at),
            "startedAt": alterations.iso(plan.started_at) if plan.started_at else None,
            "completedAt": alterations.iso(plan.completed_at) if plan.completed_at else None,
        },
        "jobs": list(plan.jobs or []),
    }

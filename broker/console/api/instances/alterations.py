"""Elsa's alterations API: ``alterations/workflows/retry``, ``alterations/run``, ``submit``,
``dry-run`` and ``{id}``, for operators (Elsa's ``run:alterations``), in Elsa's shapes; the
runtime's ``alteration_jobs`` and ``alteration_plans`` do the work and audit it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from flask import request

from broker.console import auth
from broker.console.api.base import blueprint
from broker.console.api.openapi import (
    OBJECT,
    TEXT,
    TEXTS,
    VERSION,
    documented,
    json_object,
)
from broker.console.api.params import body_object
from broker.console.roles import current, require
from broker.errors import BadRequest
from broker.runtime.admin import alteration_jobs, alteration_plans
from broker.runtime.parts import Alterations
from broker.web.context import services, transaction

logger = logging.getLogger(__name__)


#: Elsa's alteration list (``{"type": "ScheduleActivity", "activityId": ...}``, ...)
ALTERATIONS: dict[str, Any] = {
    "type": "array",
    "items": json_object(
        {
            "type": TEXT,
            "activityId": TEXT,
            "variableId": TEXT,
            "value": {},
            "targetVersion": VERSION,
        },
        ("type",),
    ),
}


def runtime() -> Alterations:
    """What the alterations run on: the console's database and registry (built by the wiring)."""
    return auth.context().operations_parts()


def actor() -> str:
    """The audit source of an alteration: ``console:<who>``."""
    principal = current()
    return f"console:{principal.name if principal is not None else 'unknown'}"


def body() -> dict[str, Any]:
    return body_object()


def strings(raw: dict[str, Any], name: str, *, required: bool) -> list[str] | None:
    """A list of strings from ``raw`` (camelCase or PascalCase), named in the error."""
    value = raw.get(name, raw.get(name[0].upper() + name[1:]))
    if value is None and not required:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise BadRequest(f"{name} must be a list of ids", field=name)
    if required and not value:
        raise BadRequest(f"{name} must name at least one id", field=name)
    return list(value)


def publish(outbox_ids: Sequence[str]) -> None:
    if not outbox_ids:
        return
    try:
        services().publisher.publish(list(outbox_ids))
    except Exception:
        logger.exception("fast-path publish of altered instances failed; the relay will retry")


def results(found: list[alteration_jobs.Result]) -> dict[str, Any]:
    publish([i for r in found for i in r.outbox_ids])
    return {"results": [r.view() for r in found]}


@blueprint.route("/alterations/workflows/retry", methods=["GET", "POST"])
@require("operator")
@documented(
    query={"workflowInstanceIds": TEXTS, "activityIds": TEXTS},
    body=json_object({"workflowInstanceIds": TEXTS, "activityIds": TEXTS}),
)
def retry() -> dict[str, Any]:
    """Retry the faulted activities of the given instances (or the ``activityIds`` named)."""
    if request.method == "GET":
        raw: dict[str, Any] = {
            "workflowInstanceIds": request.args.getlist("workflowInstanceIds") or None,
            "activityIds": request.args.getlist("activityIds") or None,
        }
    else:
        raw = body()
    instance_ids = strings(raw, "workflowInstanceIds", required=True) or []
    activity_ids = strings(raw, "activityIds", required=False)
    return results(alteration_jobs.retry(runtime(), instance_ids, activity_ids, actor=actor()))


@blueprint.post("/alterations/run")
@require("operator")
@documented(
    body=json_object(
        {"workflowInstanceIds": TEXTS, "alterations": ALTERATIONS},
        ("workflowInstanceIds", "alterations"),
    )
)
def run() -> dict[str, Any]:
    """Apply ``alterations`` to ``workflowInstanceIds`` now."""
    raw = body()
    instance_ids = strings(raw, "workflowInstanceIds", required=True) or []
    alterations = raw.get("alterations", raw.get("Alterations"))
    return results(alteration_jobs.run(runtime(), instance_ids, alterations, actor=actor()))


@blueprint.post("/alterations/submit")
@require("operator")
@documented(
    body=json_object({"id": TEXT, "alterations": ALTERATIONS, "filter": OBJECT}, ("alterations",))
)
def submit() -> dict[str, Any]:
    """Record a plan and run it on the instances its filter selects; answers its id."""
    submitted = alteration_plans.submit(runtime(), body(), actor=actor())
    publish(submitted.outbox_ids)
    return {"planId": submitted.plan_id}


@blueprint.post("/alterations/dry-run")
@require("operator")
@documented(body=OBJECT)
def dry_run() -> dict[str, Any]:
    """The instances a plan with this filter would alter."""
    with transaction(write=False) as session:
        return {"workflowInstanceIds": alteration_plans.dry_run(session, body())}


@blueprint.get("/alterations/<plan_id>")
@require("operator")
def get_plan(plan_id: str) -> dict[str, Any]:
    with transaction(write=False) as session:
        return alteration_plans.get(session, plan_id)

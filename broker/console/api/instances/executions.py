"""Activity execution records for Studio's instance viewer, built from the execution journal
(docs/design.md, section 1)."""

from __future__ import annotations

from typing import Any

from broker.console.api.base import blueprint, version_document
from broker.console.api.definitions.designer import node_ids
from broker.console.api.openapi import (
    TEXT,
    documented,
    json_object,
)
from broker.console.api.params import arg, body_object, bool_arg
from broker.console.roles import require
from broker.errors import BadRequest, NotFound
from broker.runtime.admin import instance_queries as queries
from broker.web.context import transaction

MAX_ROWS = 20_000  # journal rows read for one instance view
END_STATUS = {"Completed": "Completed", "Faulted": "Faulted", "Cancelled": "Canceled"}


def records(instance_id: str) -> list[dict[str, Any]]:
    """Every activity execution record of an instance, in the order they started."""
    with transaction(write=False) as session:
        summary, state = queries.get(session, instance_id)
        rows, _ = queries.journal(session, instance_id, offset=0, limit=MAX_ROWS)
    nodes = node_ids(version_document(summary["definitionVersionId"]).get("root"))
    waiting = {b.get("activityInstanceId") for b in state.get("bookmarks") or []}
    found: dict[str, dict[str, Any]] = {}
    for row in rows:
        key = row.activity_instance_id or f"{row.activity_id}:{row.sequence}"
        record = found.get(key)
        if record is None:
            record = found[key] = {
                "id": key,
                "workflowInstanceId": instance_id,
                "activityId": row.activity_id,
                "activityNodeId": nodes.get(row.activity_id, row.activity_id),
                "activityType": row.activity_type,
                "activityTypeVersion": 1,
                "activityName": row.activity_name,
                "activityState": None,
                "payload": {"attempt": row.attempt},
                "outputs": None,
                "properties": {},
                "metadata": {},
                "exception": None,
                "startedAt": row.timestamp.isoformat(),
                "hasBookmarks": key in waiting,
                "status": "Running",
                "aggregateFaultCount": 0,
                "completedAt": None,
                "schedulingActivityExecutionId": None,
                "schedulingActivityId": None,
                "schedulingWorkflowInstanceId": None,
                "callStackDepth": None,
            }
        values = row.payload or {}
        for kind, field in (("inputs", "activityState"), ("outputs", "outputs")):
            if isinstance(values.get(kind), dict):
                record[field] = {**(record[field] or {}), **descriptor_names(values[kind])}
        if row.event_name in END_STATUS:
            record["status"] = END_STATUS[row.event_name]
            record["completedAt"] = row.timestamp.isoformat()
            record["hasBookmarks"] = False
            record["payload"]["attempt"] = row.attempt
            if row.outcome is not None:
                record["payload"]["Outcomes"] = [o for o in row.outcome.split(",") if o]
            if row.event_name == "Faulted":
                record["aggregateFaultCount"] += 1
                record["exception"] = exception_of(state, row.activity_id, key)
    return list(found.values())


def exception_of(
    state: dict[str, Any], activity_id: str, activity_instance_id: str
) -> dict[str, Any]:
    """Elsa's ``ExceptionState`` of a faulted activity: the instance's fault when it faulted
    there, else the incident it left (strategy ``continue``)."""
    fault = state.get("fault") or {}
    found: dict[str, Any] | None = None
    if fault.get("activity_id") == activity_id:
        found = fault
    for incident in state.get("incidents") or []:
        if incident.get("activity_instance_id") == activity_instance_id:
            found = incident
    recorded = (found or {}).get("exception")
    if isinstance(recorded, dict):  # Elsa's ExceptionState, as the engine recorded it
        return {"stackTrace": None, "innerException": None, **recorded}
    return {
        "type": (found or {}).get("code") or "Fault",
        "message": (found or {}).get("message") or "The activity faulted",
        "stackTrace": None,
        "innerException": None,
    }


def descriptor_names(values: dict[str, Any]) -> dict[str, Any]:
    """Recorded values by their descriptor's PascalCase name (workflow JSON is camelCase)."""
    return {name[:1].upper() + name[1:]: value for name, value in values.items()}


def summary(record: dict[str, Any]) -> dict[str, Any]:
    keys = [
        "id",
        "workflowInstanceId",
        "activityId",
        "activityNodeId",
        "activityType",
        "activityTypeVersion",
        "activityName",
        "startedAt",
        "hasBookmarks",
        "metadata",
        "status",
        "completedAt",
    ]
    return {k: record[k] for k in keys}


def filtered() -> list[dict[str, Any]]:
    instance_id = arg("workflowInstanceId")
    if instance_id is None:
        raise BadRequest("'workflowInstanceId' is required")
    found = records(instance_id)
    node = arg("activityNodeId")
    if node is not None:
        found = [r for r in found if node in (r["activityNodeId"], r["activityId"])]
    if arg("completed") is not None:
        done = bool_arg("completed")
        found = [r for r in found if (r["completedAt"] is not None) == done]
    return found


@blueprint.get("/activity-executions/list")
@require("viewer")
@documented(query={"workflowInstanceId": TEXT, "activityNodeId": TEXT, "completed": TEXT})
def list_records() -> dict[str, Any]:
    found = filtered()
    return {"items": found, "count": len(found)}


@blueprint.get("/activity-execution-summaries/list")
@require("viewer")
@documented(query={"workflowInstanceId": TEXT, "activityNodeId": TEXT, "completed": TEXT})
def list_summaries() -> dict[str, Any]:
    found = [summary(r) for r in filtered()]
    return {"items": found, "count": len(found)}


@blueprint.get("/activity-executions/by-id")
@blueprint.get("/activity-executions/<record_id>")
@require("viewer")
@documented(query={"id": TEXT})
def get_record(record_id: str | None = None) -> dict[str, Any]:
    wanted = record_id or arg("id")
    if not wanted:
        raise BadRequest("'id' is required")
    with transaction(write=False) as session:
        instance_id = queries.instance_of_activity(session, wanted)
    for record in records(instance_id) if instance_id else []:
        if record["id"] == wanted:
            return record
    raise NotFound(f"Activity execution '{wanted}' not found")


@blueprint.post("/activity-executions/report")
@require("viewer")
@documented(body=json_object({"workflowInstanceId": TEXT}, ("workflowInstanceId",)))
def report() -> dict[str, Any]:
    body = body_object()
    if not isinstance(body.get("workflowInstanceId"), str):
        raise BadRequest("'workflowInstanceId' is required")
    stats: dict[str, dict[str, Any]] = {}
    for record in records(body["workflowInstanceId"]):
        entry = stats.setdefault(
            record["activityNodeId"],
            {
                "activityId": record["activityId"],
                "activityNodeId": record["activityNodeId"],
                "startedCount": 0,
                "completedCount": 0,
                "uncompletedCount": 0,
                "isBlocked": False,
                "isFaulted": False,
                "metadata": {},
            },
        )
        entry["startedCount"] += 1
        if record["completedAt"] is not None:
            entry["completedCount"] += 1
        else:
            entry["uncompletedCount"] += 1
        entry["isBlocked"] = entry["isBlocked"] or record["hasBookmarks"]
        entry["isFaulted"] = entry["isFaulted"] or record["status"] == "Faulted"
    return {"stats": list(stats.values())}

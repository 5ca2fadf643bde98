"""Workflow instance routes: list, get (with its state), journal, variables, cancel, delete."""

from __future__ import annotations

from typing import Any

from broker.console import audit
from broker.console.api.base import blueprint, version_document
from broker.console.api.definitions.designer import node_ids
from broker.console.api.instances.executions import descriptor_names
from broker.console.api.instances.filters import instance_filter, number, one
from broker.console.api.openapi import (
    OBJECT,
    PAGING,
    SKIP,
    TAKE,
    TEXT,
    VERSION,
    documented,
    json_object,
)
from broker.console.api.params import (
    DEFAULT_PAGE_SIZE,
    MAX_PAGE,
    MAX_PAGE_SIZE,
    MAX_SKIP,
    optional_body_object,
)
from broker.console.roles import require
from broker.errors import BadRequest, NotFound
from broker.runtime.admin import instance_queries as queries
from broker.runtime.admin import instances as admin_instances
from broker.web.context import transaction

#: the filters and paging of Elsa's instance list, in the query string or the body
INSTANCE_FILTER: dict[str, dict[str, Any]] = {
    **PAGING,
    "orderBy": TEXT,
    "orderDirection": TEXT,
    "status": TEXT,
    "subStatus": TEXT,
    "definitionId": TEXT,
    "correlationId": TEXT,
    "version": VERSION,
    "searchTerm": TEXT,
    "hasIncidents": TEXT,
    "isSystem": TEXT,
}
JOURNAL_PAGE: dict[str, dict[str, Any]] = {"skip": SKIP, "take": TAKE, **PAGING}
ORDER_BY = {"created": "created", "updatedat": "updated", "finished": "finished", "name": "name"}


@blueprint.route("/workflow-instances", methods=["GET", "POST"])
@require("viewer")
@documented(query=INSTANCE_FILTER, body=json_object(INSTANCE_FILTER))
def list_instances() -> dict[str, Any]:
    body = optional_body_object()
    page = number(body, "page", 0, MAX_PAGE) or 0
    size = number(body, "pageSize", 1, MAX_PAGE_SIZE) or DEFAULT_PAGE_SIZE
    order = (one(body, "orderBy") or "Created").lower()
    if order not in ORDER_BY:
        raise BadRequest("'orderBy' must be Created, UpdatedAt, Finished or Name")
    direction = (one(body, "orderDirection") or "Descending").lower()
    with transaction(write=False) as session:
        items, total = queries.page(
            session,
            instance_filter(body),
            offset=page * size,
            limit=size,
            order_by=ORDER_BY[order],
            descending=direction != "ascending",
        )
    return {"items": items, "totalCount": total}


def _nodes(definition_version_id: str) -> dict[str, str]:
    return node_ids(version_document(definition_version_id).get("root"))


def incidents_of(state: dict[str, Any]) -> list[dict[str, Any]]:
    """The state's incidents; a fault that ended the instance is one when none was recorded
    (Elsa's default incident strategy records the faulting activity as an incident)."""
    found = [i for i in state.get("incidents") or [] if isinstance(i, dict)]
    fault = state.get("fault")
    if not found and isinstance(fault, dict) and fault.get("activity_id"):
        found = [fault]
    return found


def workflow_state(summary: dict[str, Any], state: dict[str, Any]) -> dict[str, Any]:
    """Elsa's ``WorkflowState`` from the engine's state (bookmarks, incidents, fault, I/O)."""
    nodes = _nodes(summary["definitionVersionId"])
    fault = state.get("fault")
    return {
        "id": summary["id"],
        "definitionId": summary["definitionId"],
        "definitionVersionId": summary["definitionVersionId"],
        "definitionVersion": summary["version"],
        "correlationId": summary["correlationId"],
        "status": summary["status"],
        "subStatus": summary["subStatus"],
        "bookmarks": [
            {
                "id": b.get("id"),
                "name": b.get("name"),
                "hash": b.get("hash"),
                "payload": b.get("payload"),
                "activityId": b.get("activityId"),
                "activityNodeId": nodes.get(str(b.get("activityId")), b.get("activityId")),
                "activityInstanceId": b.get("activityInstanceId"),
                "createdAt": summary["updatedAt"],
                "autoBurn": True,
                "callbackMethodName": None,
                "metadata": None,
            }
            for b in state.get("bookmarks") or []
        ],
        "incidents": [
            {
                "activityId": i.get("activity_id"),
                "activityNodeId": nodes.get(str(i.get("activity_id")), i.get("activity_id")),
                "activityType": None,
                "message": i.get("message"),
                "exception": i.get("exception")
                or {"type": i.get("code") or "Error", "message": i.get("message")},
                "timestamp": summary["updatedAt"],
            }
            for i in incidents_of(state)
        ],
        "fault": None
        if not fault
        else {
            "exception": fault.get("exception")
            or {"type": fault.get("code") or "Fault", "message": fault.get("message")},
            "message": fault.get("message"),
            "faultedActivityId": fault.get("activity_id"),
        },
        "completionCallbacks": [],
        "activityExecutionContexts": [],
        "input": state.get("input") or {},
        "output": state.get("output") or {},
        "properties": state.get("properties") or {},
        "createdAt": summary["createdAt"],
        "updatedAt": summary["updatedAt"],
        "finishedAt": summary["finishedAt"],
    }


@blueprint.get("/workflow-instances/<instance_id>")
@require("viewer")
def get_instance(instance_id: str) -> dict[str, Any]:
    with transaction(write=False) as session:
        summary, state = queries.get(session, instance_id)
    count = max(int(summary.get("incidentCount") or 0), len(incidents_of(state)))
    return {**summary, "incidentCount": count, "workflowState": workflow_state(summary, state)}


def journal_record(
    instance_id: str, r: queries.JournalRow, nodes: dict[str, str]
) -> dict[str, Any]:
    """Elsa's ``WorkflowExecutionLogRecord``; the inputs an entry recorded are its
    ``activityState``, its outputs are in its ``payload``."""
    recorded = r.payload or {}
    inputs, outputs = recorded.get("inputs"), recorded.get("outputs")
    payload: dict[str, Any] = {"outcome": r.outcome, "attempt": r.attempt}
    if isinstance(outputs, dict):
        payload["outputs"] = descriptor_names(outputs)
    return {
        "id": f"{instance_id}:{r.sequence}",
        "activityInstanceId": r.activity_instance_id,
        "parentActivityInstanceId": None,
        "activityId": r.activity_id,
        "activityType": r.activity_type,
        "activityTypeVersion": 1,
        "activityName": r.activity_name,
        "nodeId": nodes.get(r.activity_id, r.activity_id),
        "timestamp": r.timestamp.isoformat(),
        "sequence": r.sequence,
        "eventName": r.event_name,
        "message": r.outcome and f"Outcome: {r.outcome}",
        "source": None,
        "activityState": descriptor_names(inputs) if isinstance(inputs, dict) else None,
        "payload": payload,
    }


def _names(raw: dict[str, Any], key: str) -> list[str] | None:
    value = next((v for k, v in raw.items() if k.lower() == key.lower()), None)
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise BadRequest(f"'filter.{key}' must be a list of strings")
    return value


def journal_filter(body: dict[str, Any], nodes: dict[str, str]) -> queries.JournalFilter:
    """Elsa's ``JournalFilter`` from the body; node ids are matched through the designer's map."""
    raw = next((v for k, v in body.items() if k.lower() == "filter"), None) or {}
    if not isinstance(raw, dict):
        raise BadRequest("'filter' must be an object")
    activity_ids = _names(raw, "activityIds")
    node_ids = _names(raw, "activityNodeIds")
    if node_ids is not None:
        by_node = {node: activity for activity, node in nodes.items()}
        of_nodes = [by_node.get(n, n) for n in node_ids]
        activity_ids = (
            of_nodes if activity_ids is None else sorted(set(of_nodes) & set(activity_ids))
        )
    return queries.JournalFilter(
        activity_ids=activity_ids,
        excluded_activity_types=_names(raw, "excludedActivityTypes"),
        event_names=_names(raw, "eventNames"),
    )


def _journal_page(body: dict[str, Any]) -> tuple[int, int]:
    """(offset, limit) from ``skip``/``take`` or ``page``/``pageSize``, in the body or query."""

    skip, take = number(body, "skip", 0, MAX_SKIP), number(body, "take", 1, MAX_PAGE_SIZE)
    if skip is not None or take is not None:
        return skip or 0, take or 50
    page, size = number(body, "page", 0, MAX_PAGE), number(body, "pageSize", 1, MAX_PAGE_SIZE)
    size = size or DEFAULT_PAGE_SIZE
    return (page or 0) * size, size


@blueprint.route("/workflow-instances/<instance_id>/journal", methods=["GET", "POST"])
@require("viewer")
@documented(query=JOURNAL_PAGE, body=json_object({"filter": OBJECT, **JOURNAL_PAGE}))
def get_journal(instance_id: str) -> dict[str, Any]:
    body = optional_body_object()
    offset, limit = _journal_page(body)
    with transaction(write=False) as session:
        summary, _ = queries.get(session, instance_id)
        nodes = _nodes(summary["definitionVersionId"])
        rows, total = queries.journal(
            session,
            instance_id,
            offset=offset,
            limit=limit,
            only=journal_filter(body, nodes),
        )
    items = [journal_record(instance_id, r, nodes) for r in rows]
    return {"items": items, "totalCount": total}


@blueprint.get("/workflow-instances/<instance_id>/journal/<activity_id>")
@require("viewer")
def get_last_journal_entry(instance_id: str, activity_id: str) -> dict[str, Any]:
    """The activity's last Started, Completed or Faulted record (Elsa's ``GetLastEntry``)."""
    with transaction(write=False) as session:
        summary, _ = queries.get(session, instance_id)
        found = queries.last_journal_entry(session, instance_id, activity_id)
    if found is None:
        raise NotFound(f"No journal entry of activity '{activity_id}' in '{instance_id}'")
    return journal_record(instance_id, found, _nodes(summary["definitionVersionId"]))


@blueprint.get("/workflow-instances/<instance_id>/variables")
@require("viewer")
def get_variables(instance_id: str) -> dict[str, Any]:
    with transaction(write=False) as session:
        summary, state = queries.get(session, instance_id)
    values: dict[str, Any] = dict(state.get("variables") or {})
    root = (state.get("contexts") or {}).get(state.get("rootContextId") or "")
    if isinstance(root, dict):
        values.update((root.get("scope") or {}).get("vars") or {})
    declared = {
        str(v.get("name")): str(v.get("id") or v.get("name"))
        for v in version_document(summary["definitionVersionId"]).get("variables") or []
        if isinstance(v, dict)
    }
    items = [{"id": declared.get(n, n), "name": n, "value": v} for n, v in sorted(values.items())]
    return {"items": items, "count": len(items)}


@blueprint.post("/cancel/workflow-instances/<instance_id>")
@blueprint.post("/workflow-instances/<instance_id>/cancel")
@require("operator")
def cancel_instance(instance_id: str) -> dict[str, Any]:
    with transaction() as session:
        admin_instances.cancel(session, instance_id)
        audit.record(session, "instance.cancel", instance_id)
        summary, _ = queries.get(session, instance_id)
    return summary


@blueprint.delete("/workflow-instances/<instance_id>")
@require("operator")
def delete_instance(instance_id: str) -> tuple[str, int]:
    with transaction() as session:
        admin_instances.delete(session, instance_id)
        audit.record(session, "instance.delete", instance_id)
    return "", 204

"""Execute and dispatch: a console user starts a workflow (Elsa's ``execute`` and ``dispatch``;
docs/design.md, section 1)."""

from __future__ import annotations

import datetime as dt
import time
from typing import Any

from flask import Response, jsonify, request

from broker.console.api.base import blueprint, error_response, workflow_registry
from broker.console.api.definitions.routes import one
from broker.console.api.instances.routes import workflow_state
from broker.console.api.openapi import (
    OBJECT,
    TEXT,
    documented,
    json_object,
)
from broker.console.api.params import VersionOptions, optional_body_object
from broker.console.roles import allows, current, require
from broker.errors import BadRequest, BrokerError, Forbidden, NotFound
from broker.registry.versions import PublishedWorkflow
from broker.runtime.admin import instance_queries as queries
from broker.runtime.admin import starts
from broker.runtime.admin.enums import InstanceStatus, InstanceSubStatus
from broker.safety.bounded import decode_json
from broker.web.context import services, transaction
from broker.web.inputs import body_limits

#: how long ``execute`` waits for a worker to save the first step
EXECUTE_WAIT_SECONDS = 10.0
POLL_SECONDS = 0.1

COMMON_FIELDS = ("input", "correlationId", "name", "versionOptions")
DISPATCH_FIELDS = ("instanceId",)
UNSUPPORTED_FIELDS = ("triggerActivityId", "activityHandle", "variables", "channel")


#: a start's fields (Elsa's ``ExecuteWorkflowDefinitionRequest``)
START: dict[str, dict[str, Any]] = {
    "input": OBJECT,
    "correlationId": TEXT,
    "name": TEXT,
    "versionOptions": TEXT,
}
START_QUERY: dict[str, dict[str, Any]] = {
    "input": TEXT,
    "correlationId": TEXT,
    "name": TEXT,
    "versionOptions": TEXT,
}


def start_options(*, dispatch: bool) -> dict[str, Any]:
    """The start request, from the JSON body (POST) or the query string (GET execute); field
    names are matched case-insensitively as Elsa binds them, an unknown field is refused."""
    allowed = COMMON_FIELDS + UNSUPPORTED_FIELDS + (DISPATCH_FIELDS if dispatch else ())
    by_lower = {name.lower(): name for name in allowed}
    if request.method == "GET":
        raw: dict[str, Any] = dict(request.args.items())
        for name in ("input", "variables"):
            found = next((k for k in raw if k.lower() == name), None)
            if found is not None:
                limits = body_limits(services().settings)
                raw[found] = decode_json(str(raw[found]), limits, field=name)
    else:
        raw = optional_body_object()
    options: dict[str, Any] = {}
    for key, value in raw.items():
        field = by_lower.get(key.lower())
        if field is None:
            raise BadRequest(f"'{key}' is not a field of this request", field=key)
        options[field] = value
    for name in UNSUPPORTED_FIELDS:
        if options.get(name) not in (None, "", {}, []):
            raise BadRequest(f"'{name}' is not supported by this broker", field=name)
    for name in ("correlationId", "name", "instanceId"):
        value = options.get(name)
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise BadRequest(f"'{name}' must be a non-empty string", field=name)
    return options


def chosen_version(definition_id: str, options: dict[str, Any]) -> PublishedWorkflow:
    raw = options.get("versionOptions")
    if raw is not None and not isinstance(raw, str | int):
        raise BadRequest("'versionOptions' must be a string or a version number")
    version_options = VersionOptions.parse(str(raw) if raw is not None else None, "Published")
    v = one(definition_id, version_options)
    if v.is_draft:
        raise BadRequest(
            f"Version {v.version} of workflow '{definition_id}' is a draft: publish it to run it, "
            "or ask for the Published version",
            field="versionOptions",
        )
    published = workflow_registry().get_version(v.id)
    if published is None:
        raise NotFound(f"Workflow definition version '{v.id}' is not loaded")
    return published


def start(definition_id: str, *, dispatch: bool) -> tuple[starts.Started, PublishedWorkflow]:
    """Record the start (one transaction), then publish its outbox row."""
    options = start_options(dispatch=dispatch)
    workflow = chosen_version(definition_id, options)
    principal = current()
    user = principal.name if principal is not None else "unknown"
    svc = services()
    if workflow.request_type:
        for name in ("correlationId", "name", "instanceId"):
            if options.get(name) is not None:
                raise BadRequest(
                    f"'{name}' cannot be chosen for a request-type workflow: it runs as a "
                    "request, whose id is its correlation id",
                    field=name,
                )
        with transaction() as session:
            started = starts.start_request_txn(
                session,
                user=user,
                request_type=workflow.request_type,
                workflow=workflow,
                input=options.get("input"),
                dispatch_lease=svc.publisher.dispatch_lease,
            )
    else:
        workflow_input = options.get("input")
        if workflow_input is not None and not isinstance(workflow_input, dict):
            raise BadRequest("'input' must be a JSON object", field="input")
        with transaction() as session:
            started = starts.start_instance_txn(
                session,
                user=user,
                workflow=workflow,
                name=options.get("name") or workflow.name,
                instance_id=options.get("instanceId"),
                input=workflow_input,
                correlation_id=options.get("correlationId"),
            )
    started.publish(svc.publisher)
    return started, workflow


@blueprint.post("/workflow-definitions/<definition_id>/dispatch")
@require("designer")
@documented(body=json_object(START | {"instanceId": TEXT}))
def dispatch(definition_id: str) -> dict[str, Any]:
    started, _ = start(definition_id, dispatch=True)
    return {"workflowInstanceId": started.instance_id}


@blueprint.route("/workflow-definitions/<definition_id>/execute", methods=["GET", "POST"])
@require("viewer")
@documented(query=START_QUERY, body=json_object(START))
def execute(definition_id: str) -> tuple[Response, int, dict[str, str]]:
    try:
        principal = current()
        if principal is None or not allows(principal.role, "designer"):
            # Studio offers Run to every role; this header makes it say the run was refused.
            raise Forbidden(f"Your role ({getattr(principal, 'role', '?')}) cannot run workflows")
        started, workflow = start(definition_id, dispatch=False)
    except BrokerError as exc:
        # Studio reads only this header (its client does not raise on an error status): without
        # it a refused Run would show nothing; API clients read the body.
        refused, status, headers = error_response(exc)
        return refused, status, {**headers, "x-elsa-workflow-cannot-start": "True"}
    summary, state = wait_for_first_step(started, workflow)
    status = 500 if summary["subStatus"] == InstanceSubStatus.FAULTED.value else 200
    headers = {
        "x-elsa-workflow-cannot-start": "False",
        "x-elsa-workflow-instance-id": started.instance_id,
        "x-elsa-response": "true",
    }
    return jsonify({"workflowState": workflow_state(summary, state)}), status, headers


def wait_for_first_step(
    started: starts.Started, workflow: PublishedWorkflow
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The instance's summary and state once a worker saved its first step, or as they are when
    ``EXECUTE_WAIT_SECONDS`` ran out (a request's instance row is written by its first step)."""
    deadline = time.monotonic() + EXECUTE_WAIT_SECONDS
    while True:
        with transaction(write=False) as session:
            found = queries.find(session, started.instance_id)
        if found is not None and found[2]:
            return found[0], found[1]
        if time.monotonic() >= deadline:
            break
        time.sleep(POLL_SECONDS)
    if found is not None:
        return found[0], found[1]
    now = dt.datetime.now(dt.UTC).isoformat()
    pending = {
        "id": started.instance_id,
        "definitionId": workflow.definition_id,
        "definitionVersionId": workflow.version_id,
        "version": workflow.version,
        "status": InstanceStatus.RUNNING.value,
        "subStatus": InstanceSubStatus.PENDING.value,
        "correlationId": started.request_id,
        "name": workflow.name,
        "incidentCount": 0,
        "isSystem": False,
        "createdAt": now,
        "updatedAt": now,
        "finishedAt": None,
    }
    return pending, {}

"""``/workflows/{path}``: a call to a workflow's ``HttpEndpoint`` trigger starts a request; one
that no trigger serves resumes the instance of this client waiting at that endpoint
(docs/design.md, "HTTP endpoints in the middle of a workflow")."""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any

from flask import Blueprint, Response, jsonify, request

from broker.engine.parser import parse_workflow
from broker.errors import Forbidden, MissingKeys, NotFound, PayloadTooLarge
from broker.ingress.auth import authenticate
from broker.ingress.http_responses import render
from broker.ingress.http_routes import best_matches, request_size_limit
from broker.ingress.schemas import check_keys, ordinal_fold
from broker.registry.triggers import HTTP_ENDPOINT
from broker.runtime.admin.enums import RequestStatus
from broker.runtime.bookmarks.endpoints import Resumed, resume_endpoint, resumed_response
from broker.runtime.bookmarks.triggers import Start, current_triggers, http_response, start_workflow
from broker.web.context import services, transaction
from broker.web.inputs import read_json

logger = logging.getLogger(__name__)

bp = Blueprint("http_triggers", __name__)

POLL = 0.1
#: request headers never handed to a workflow (secrets, hop-by-hop)
_HIDDEN_HEADERS = frozenset({"authorization", "cookie", "proxy-authorization", "connection"})
_RESPONDS: dict[str, bool] = {}  # by version id: has a response activity
#: the activities that answer the call
RESPONSE_TYPES = frozenset({"Elsa.WriteHttpResponse", "Elsa.WriteFileHttpResponse"})
#: the methods an HttpEndpoint may accept (Studio's options)
METHODS = ["GET", "POST", "PUT", "DELETE", "PATCH"]
_FORM = "application/x-www-form-urlencoded"


@bp.route("/workflows/<path:path>", methods=METHODS)
def call_workflow(
    path: str,
) -> Response | tuple[Response, int] | tuple[Response, int, dict[str, str]]:
    svc = services()
    client = authenticate()
    method = request.method.lower()
    registry = svc.workflow_directory()
    with transaction(write=False) as session:
        matches = best_matches(
            (
                ((current, row), str((row.payload or {}).get("path", "")))
                for current, row in current_triggers(session, registry, HTTP_ENDPOINT)
                if (row.payload or {}).get("method") == method
            ),
            path,
        )
    if not matches:
        return _resume(path, client.client_id)
    (current, row), route = matches[0]
    request_type = current.request_type
    rule = svc.client_directory().rule_for(client.client_id, request_type) if request_type else None
    if rule is None:
        raise Forbidden(
            f"Client '{client.client_id}' may not call {request.method} /workflows/{path}"
        )
    # The request type's required keys still apply: they come as query parameters.
    query = request.args.to_dict()
    missing, _ = check_keys(query, tuple(rule.required_keys), True)
    if missing:
        raise MissingKeys(missing)
    wanted_keys = {ordinal_fold(k) for k in rule.required_keys}
    keys = {k: v for k, v in query.items() if ordinal_fold(k) in wanted_keys}
    limit = request_size_limit(current.document, row.activity_id)
    if limit is not None and len(request.get_data(cache=True)) > limit:
        raise PayloadTooLarge(f"The request body is over this endpoint's limit of {limit} bytes")
    with transaction() as session:
        started = start_workflow(
            session,
            Start(
                workflow=current,
                activity_id=row.activity_id,
                trigger_name=HTTP_ENDPOINT,
                client_id=client.client_id,
                key=("http", str(uuid.uuid4())),
                keys=keys,
                # Elsa's correlation id selectors: the query string, then a header
                correlation_id=_correlation_id(),
                trigger=_call(path, query, route),
                source="ingress",
            ),
            refuse=True,
        )
    assert started is not None  # a fresh key always starts, or refuses by raising
    request_id, outbox_id = started
    svc.publisher.publish([outbox_id])
    if _responds(current):
        answer = _wait_for_response(request_id, svc.settings.http_trigger_wait)
        if answer is not None:
            return answer
    body_out = {"correlationId": request_id, "status": RequestStatus.QUEUED.value}
    return jsonify(body_out), 202, {"Location": f"/requests/{request_id}"}


def _resume(path: str, client_id: str) -> Response | tuple[Response, int]:
    """Resume this client's instance waiting at the endpoint (Elsa's bookmark lookup, narrowed
    by ``workflowInstanceId`` and ``correlationId``) and answer what it writes."""
    svc = services()
    item_id = str(uuid.uuid4())
    with transaction() as session:
        resumed = resume_endpoint(
            session,
            svc.settings,
            item_id=item_id,
            client_key=client_id.lower(),
            method=request.method,
            path=path,
            request=_call(path, request.args.to_dict()),
            instance_id=request.args.get("workflowInstanceId")
            or request.headers.get("X-Workflow-Instance-ID"),
            correlation_id=_correlation_id(),
        )
    if resumed is None:
        raise NotFound(f"No workflow serves {request.method} /workflows/{path}")
    svc.publisher.publish(list(resumed.outbox_ids))
    answer = _wait_for_resume(resumed, svc.settings.http_trigger_wait)
    if answer is not None:
        return answer
    status = "Processing" if resumed.request_id else None
    return jsonify({"correlationId": resumed.request_id, "status": status}), 202


def _call(path: str, query: dict[str, str], route: Any = None) -> dict[str, Any]:
    """The HTTP request as the workflow sees it (HttpEndpoint's outputs; ``route``: the route
    template's values, when a trigger's template matched)."""
    call: dict[str, Any] = {
        "method": request.method,
        "path": "/" + path.strip("/"),
        "query": query,
        "headers": {k: v for k, v in request.headers.items() if k.lower() not in _HIDDEN_HEADERS},
        "body": _body(),
    }
    if route is not None:
        call["route"] = route
    return call


def _correlation_id() -> str | None:
    return request.args.get("correlationId") or request.headers.get("X-Correlation-ID") or None


def _body() -> Any:
    if request.mimetype == _FORM:
        return request.form.to_dict() or None
    if not request.get_data(cache=True).strip():
        return None
    if request.is_json:
        return read_json(services().settings)
    return request.get_data(as_text=True)


def _responds(workflow: Any) -> bool:
    found = _RESPONDS.get(workflow.version_id)
    if found is None:
        types = parse_workflow(workflow.document).activity_types()
        found = bool(types & RESPONSE_TYPES)
        _RESPONDS[workflow.version_id] = found
    return found


def _wait_for_response(request_id: str, bound: float) -> Response | None:
    """The workflow's response once its step is saved, or None after ``bound`` seconds (or when
    the instance finished or faulted without one)."""
    deadline = time.monotonic() + bound
    while time.monotonic() < deadline:
        with transaction(write=False) as session:
            response, over = http_response(session, request_id)
        if response is not None:
            return render(services().shared().files, response, request)
        if over:
            return None
        time.sleep(POLL)
    logger.info(
        "request %s: no WriteHttpResponse within %.0fs; answering 202",
        request_id,
        bound,
        extra={"request_id": request_id},
    )
    return None


def _wait_for_resume(resumed: Resumed, bound: float) -> Response | None:
    """What the resumed workflow wrote for this call; ``200`` with the request's state when its
    step ended without a response (as Elsa's middleware answers); None after ``bound``."""
    deadline = time.monotonic() + bound
    while time.monotonic() < deadline:
        with transaction(write=False) as session:
            response, over = resumed_response(session, resumed)
        if response is not None:
            return render(services().shared().files, response, request)
        if over:
            return jsonify(
                {"correlationId": resumed.request_id, "workflowInstanceId": resumed.instance_id}
            )
        time.sleep(POLL)
    logger.info(
        "instance %s: no response to the resuming call within %.0fs; answering 202",
        resumed.instance_id,
        bound,
        extra={"instance_id": resumed.instance_id},
    )
    return None

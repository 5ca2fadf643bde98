"""``GET|POST /workflows/{path}``: a call to a workflow's ``HttpEndpoint`` trigger
(docs/design.md, section 1)."""

from __future__ import annotations

import json
import logging
import time
import uuid
from typing import Any

from flask import Blueprint, Response, jsonify, request

from broker.engine.parser import parse_workflow
from broker.errors import Forbidden, MissingKeys, NotFound, PayloadTooLarge
from broker.ingress.auth import authenticate
from broker.ingress.context import services, transaction
from broker.ingress.http_routes import best_matches, request_size_limit
from broker.ingress.schemas import check_keys, ordinal_fold, read_json
from broker.registry.triggers import HTTP_ENDPOINT
from broker.runtime.admin.enums import RequestStatus
from broker.runtime.bookmarks.triggers import Start, current_triggers, http_response, start_workflow

logger = logging.getLogger(__name__)

bp = Blueprint("http_triggers", __name__)

POLL = 0.1
#: request headers never handed to a workflow (secrets, hop-by-hop)
_HIDDEN_HEADERS = frozenset({"authorization", "cookie", "proxy-authorization", "connection"})
_RESPONDS: dict[str, bool] = {}  # by version id: has a WriteHttpResponse
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
        raise NotFound(f"No workflow serves {request.method} /workflows/{path}")
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
    body = _body()
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
                trigger={
                    "method": request.method,
                    "path": "/" + path.strip("/"),
                    "query": query,
                    "route": route,
                    "headers": {
                        k: v for k, v in request.headers.items() if k.lower() not in _HIDDEN_HEADERS
                    },
                    "body": body,
                },
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
        found = bool(types & {"Elsa.WriteHttpResponse"})
        _RESPONDS[workflow.version_id] = found
    return found


def _wait_for_response(request_id: str, bound: float) -> Response | None:
    """The workflow's WriteHttpResponse once its step is saved, or None after ``bound`` seconds
    (or when the instance finished or faulted without one)."""
    deadline = time.monotonic() + bound
    while time.monotonic() < deadline:
        with transaction(write=False) as session:
            response, over = http_response(session, request_id)
        if response is not None:
            return _render(response)
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


def _render(response: dict[str, Any]) -> Response:
    content = response.get("content")
    content_type = response.get("contentType")
    if isinstance(content, dict | list) or (content_type or "").endswith("json"):
        text = content if isinstance(content, str) else json.dumps(content)
        content_type = content_type or "application/json"
    else:
        text = "" if content is None else str(content)
        content_type = content_type or "text/plain; charset=utf-8"
    out = Response(text, status=int(response.get("statusCode") or 200), content_type=content_type)
    for name, value in (response.get("headers") or {}).items():
        if name.lower() not in ("content-length", "content-type", "transfer-encoding"):
            out.headers[name] = value
    return out

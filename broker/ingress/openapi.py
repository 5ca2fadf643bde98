"""The OpenAPI 3 document of the public listener, served at ``GET /openapi.json``.

Written by hand next to the code it describes and checked against it by the schemathesis suite
(``tests/e2e/test_openapi_schemathesis.py``): every path, parameter, body and response here is one
the blueprints implement.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, jsonify

from broker import __version__
from broker.runtime.enums import RequestStatus

bp = Blueprint("openapi", __name__)

JSON = "application/json"
NAME_MAX = 200
URL_MAX = 2000
WEBHOOK_EVENTS = [
    "request.completed",
    "request.faulted",
    "request.cancelled",
    "request.processing",
]
STATUSES = [s.value for s in RequestStatus]


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    return {**schema, "nullable": True}


def _body(schema: dict[str, Any], description: str, **extra: Any) -> dict[str, Any]:
    return {"description": description, "content": {JSON: {"schema": schema}}, **extra}


ERRORS = {
    400: "Malformed request: the body names the field",
    401: "No valid, allowlisted client certificate",
    403: "Another client's record, or a missing scope",
    404: "No such record",
    409: "The record's state forbids the action",
    413: "The body exceeds BROKER_MAX_BODY_BYTES",
    415: "The body's Content-Type is not application/json (or a +json type)",
    429: "Over the client's rate limit: `limit` names it, Retry-After says when to try again",
    503: "Database unavailable or runtime paused; see Retry-After",
}


def _responses(ok: dict[int, dict[str, Any]], *errors: int) -> dict[str, Any]:
    answers: dict[str, Any] = {str(code): spec for code, spec in ok.items()}
    for code in (401, 503, *errors):
        answers[str(code)] = {"$ref": f"#/components/responses/E{code}"}
    answers["414"] = {"$ref": "#/components/responses/E414"}
    return answers


def _query(name: str, schema: dict[str, Any], description: str) -> dict[str, Any]:
    # An empty value (``?status=``) is taken as no value at all, as a form would send it.
    return {
        "name": name,
        "in": "query",
        "required": False,
        "allowEmptyValue": True,
        "schema": schema,
        "description": description,
    }


def _path(name: str, description: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": "path",
        "required": True,
        "description": description,
        "schema": {
            "type": "string",
            "minLength": 1,
            "maxLength": NAME_MAX,
            "pattern": "^[A-Za-z0-9_.:~-]*[A-Za-z0-9_:~-][A-Za-z0-9_.:~-]*$",
        },
    }


PAGE = [
    _query("page", {"type": "integer", "minimum": 0, "maximum": 1_000_000}, "zero-based page"),
    _query("pageSize", {"type": "integer", "minimum": 1, "maximum": 500}, "items per page"),
]
NAME = {"type": "string", "minLength": 1, "maxLength": NAME_MAX}


def _scoped(
    scope: str,
    summary: str,
    ok: dict[int, dict[str, Any]],
    *errors: int,
    parameters: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    operation: dict[str, Any] = {
        "summary": summary,
        "tags": ["admin"],
        "x-required-scope": scope,
        "responses": _responses(ok, 403, *errors),
    }
    if parameters:
        operation["parameters"] = parameters
    return operation


SCHEMAS: dict[str, Any] = {
    "Error": {
        "type": "object",
        "required": ["error"],
        "properties": {
            "error": {"type": "string"},
            "code": {"type": "string"},
            "field": {"type": "string"},
            "keys": {"type": "array", "items": {"type": "string"}},
        },
        "additionalProperties": True,
    },
    "Submission": {
        "type": "object",
        "required": ["requestType"],
        "additionalProperties": False,
        "properties": {
            "requestType": {**NAME, "pattern": "\\S"},
            "keys": {"type": "object", "additionalProperties": {"type": "string"}},
            "payload": _nullable({"type": "object"}),
            "callbackUrl": {
                "type": "string",
                "maxLength": URL_MAX,
                "pattern": "^https?://",
                "description": "a one-off webhook endpoint for this request's terminal events; "
                "only for clients whose clients.json entry has allowCallbackUrl",
            },
        },
    },
    "Accepted": {
        "type": "object",
        "required": ["correlationId", "status"],
        "properties": {
            "correlationId": {"type": "string"},
            "status": {"type": "string", "enum": STATUSES},
        },
    },
    "Request": {
        "type": "object",
        "required": [
            "correlationId",
            "clientId",
            "requestType",
            "keys",
            "status",
            "result",
            "errorDetail",
            "submittedAt",
            "updatedAt",
            "workflow",
        ],
        "properties": {
            "correlationId": {"type": "string"},
            "clientId": {"type": "string"},
            "requestType": {"type": "string"},
            "keys": {"type": "object", "additionalProperties": {"type": "string"}},
            "status": {"type": "string", "enum": STATUSES},
            "result": {"nullable": True},
            "errorDetail": _nullable({"type": "string"}),
            "submittedAt": {"type": "string", "format": "date-time"},
            "updatedAt": {"type": "string", "format": "date-time"},
            "workflow": {
                "type": "object",
                "required": ["definitionId", "version", "instanceId", "subStatus"],
                "properties": {
                    "definitionId": _nullable({"type": "string"}),
                    "version": _nullable({"type": "integer"}),
                    "instanceId": _nullable({"type": "string"}),
                    "subStatus": _nullable({"type": "string"}),
                    "instanceName": _nullable({"type": "string"}),
                    "instanceCorrelationId": _nullable({"type": "string"}),
                },
            },
        },
    },
    "RequestPage": {
        "type": "object",
        "required": ["items", "next"],
        "properties": {
            "items": {"type": "array", "items": _ref("Request")},
            "next": _nullable({"type": "string"}),
        },
    },
    "AuditEvent": {
        "type": "object",
        "required": ["timestamp", "eventType", "source", "message", "properties"],
        "properties": {
            "timestamp": {"type": "string", "format": "date-time"},
            "eventType": {"type": "string"},
            "source": {"type": "string"},
            "message": _nullable({"type": "string"}),
            "properties": {"type": "object"},
        },
    },
    "Stimulus": {
        "type": "object",
        "required": ["correlationId"],
        "additionalProperties": False,
        "properties": {
            "correlationId": {**NAME, "pattern": "\\S"},
            "payload": _nullable({"type": "object"}),
        },
    },
    "QueueItem": {
        "type": "object",
        "required": ["queueItemId"],
        "properties": {"queueItemId": {"type": "string"}},
    },
    "RequestTypes": {
        "type": "object",
        "required": ["requestTypes"],
        "properties": {
            "requestTypes": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["requestType", "requiredKeys", "allowAdditionalKeys", "workflow"],
                    "properties": {
                        "requestType": {"type": "string"},
                        "requiredKeys": {"type": "array", "items": {"type": "string"}},
                        "allowAdditionalKeys": {"type": "boolean"},
                        "workflow": _nullable(
                            {
                                "type": "object",
                                "required": ["definitionId", "version"],
                                "properties": {
                                    "definitionId": {"type": "string"},
                                    "version": {"type": "integer"},
                                },
                            }
                        ),
                    },
                },
            }
        },
    },
    "DeadLetter": {
        "type": "object",
        "required": ["id", "kind", "reason", "replayable", "createdAt"],
        "properties": {
            "id": {"type": "string"},
            "kind": {"type": "string", "enum": ["request", "outbox", "webhook", "bookmark"]},
            "reason": {"type": "string"},
            "requestId": _nullable({"type": "string"}),
            "workflowInstanceId": _nullable({"type": "string"}),
            "activityId": _nullable({"type": "string"}),
            "sourceId": _nullable({"type": "string"}),
            "clientKey": _nullable({"type": "string"}),
            "name": _nullable({"type": "string"}),
            "error": _nullable({"type": "string"}),
            "attempts": {"type": "integer"},
            "replayable": {"type": "boolean"},
            "replayedAt": _nullable({"type": "string", "format": "date-time"}),
            "createdAt": {"type": "string", "format": "date-time"},
        },
        "additionalProperties": False,
    },
    "Replayed": {
        "type": "object",
        "required": ["replayed", "queueItemId", "reason"],
        "properties": {
            "replayed": {"type": "boolean"},
            "queueItemId": {"type": "string"},
            "reason": _nullable({"type": "string"}),
        },
    },
    "Instance": {
        "type": "object",
        "required": ["id", "definitionId", "status", "subStatus"],
        "properties": {
            "id": {"type": "string"},
            "definitionId": {"type": "string"},
            "definitionVersionId": {"type": "string"},
            "version": {"type": "integer"},
            "requestId": _nullable({"type": "string"}),
            "parentId": _nullable({"type": "string"}),
            "correlationId": _nullable({"type": "string"}),
            "name": _nullable({"type": "string"}),
            "status": {"type": "string"},
            "subStatus": {"type": "string"},
            "incidentCount": {"type": "integer"},
            "fault": _nullable({"type": "object"}),
            "createdAt": {"type": "string", "format": "date-time"},
            "updatedAt": {"type": "string", "format": "date-time"},
            "finishedAt": _nullable({"type": "string", "format": "date-time"}),
        },
    },
    "JournalEntry": {
        "type": "object",
        "required": ["sequence", "activityId", "eventName", "timestamp"],
        "properties": {
            "sequence": {"type": "integer"},
            "activityId": {"type": "string"},
            "activityInstanceId": _nullable({"type": "string"}),
            "activityType": {"type": "string"},
            "activityName": _nullable({"type": "string"}),
            "eventName": {"type": "string"},
            "outcome": _nullable({"type": "string"}),
            "attempt": {"type": "integer"},
            "timestamp": {"type": "string", "format": "date-time"},
        },
    },
    "WebhookEndpointRequest": {
        "type": "object",
        "required": ["url"],
        "additionalProperties": False,
        "properties": {
            "url": {
                "type": "string",
                "maxLength": URL_MAX,
                "description": "http(s) URL; refused when it is a private or loopback address "
                "that BROKER_HTTP_ALLOWLIST does not admit",
            },
            "events": {
                "type": "array",
                "minItems": 1,
                "items": {"type": "string", "enum": WEBHOOK_EVENTS},
                "description": "default: the three terminal events (request.processing is "
                "sent only when named)",
            },
            "secret": {
                "type": "string",
                "pattern": "^whsec_",
                "description": "whsec_ + base64 of 24 to 64 bytes; generated when absent",
            },
        },
    },
    "WebhookEndpoint": {
        "type": "object",
        "required": ["id", "url", "events", "source", "enabled", "disabled", "createdAt"],
        "properties": {
            "id": {"type": "string"},
            "url": {"type": "string"},
            "events": {"type": "array", "items": {"type": "string", "enum": WEBHOOK_EVENTS}},
            "source": {"type": "string", "enum": ["api", "config", "callback"]},
            "enabled": {"type": "boolean"},
            "disabled": _nullable(
                {
                    "type": "object",
                    "description": "why the endpoint was disabled (e.g. it failed for the "
                    "whole retry horizon)",
                    "properties": {
                        "reason": _nullable({"type": "string"}),
                        "at": _nullable({"type": "string", "format": "date-time"}),
                    },
                }
            ),
            "failingSince": _nullable({"type": "string", "format": "date-time"}),
            "createdAt": {"type": "string", "format": "date-time"},
        },
    },
    "WebhookEndpointWithSecret": {
        "allOf": [
            _ref("WebhookEndpoint"),
            {
                "type": "object",
                "required": ["secret"],
                "properties": {
                    "secret": {"type": "string", "description": "shown only in this answer"}
                },
            },
        ]
    },
    "WebhookEndpoints": {
        "type": "object",
        "required": ["items"],
        "properties": {"items": {"type": "array", "items": _ref("WebhookEndpoint")}},
    },
    "WebhookAttempt": {
        "type": "object",
        "required": [
            "deliveryId",
            "webhookId",
            "eventType",
            "attempt",
            "attemptedAt",
            "statusCode",
            "latencyMs",
            "outcome",
        ],
        "properties": {
            "deliveryId": {"type": "string"},
            "webhookId": {"type": "string"},
            "eventType": {"type": "string", "enum": WEBHOOK_EVENTS},
            "correlationId": _nullable({"type": "string"}),
            "attempt": {"type": "integer"},
            "attemptedAt": {"type": "string", "format": "date-time"},
            "statusCode": _nullable({"type": "integer"}),
            "latencyMs": {"type": "integer"},
            "outcome": {"type": "string", "enum": ["delivered", "retry", "dead"]},
            "error": _nullable({"type": "string"}),
            "deliveryState": {"type": "string", "enum": ["pending", "delivered", "dead"]},
            "nextAttemptAt": _nullable({"type": "string", "format": "date-time"}),
        },
    },
    "WebhookAttempts": {
        "type": "object",
        "required": ["items"],
        "properties": {"items": {"type": "array", "items": _ref("WebhookAttempt")}},
    },
    "WebhookEvent": {
        "type": "object",
        "description": "The body the broker POSTs to an endpoint, with the headers webhook-id "
        "(the same on every retry), webhook-timestamp and webhook-signature (Standard Webhooks: "
        "v1,<base64 HMAC-SHA256 of id.timestamp.body>)",
        "required": ["type", "timestamp", "data"],
        "properties": {
            "type": {"type": "string", "enum": WEBHOOK_EVENTS},
            "timestamp": {"type": "string", "format": "date-time"},
            "data": {
                "type": "object",
                "required": [
                    "correlationId",
                    "requestType",
                    "status",
                    "result",
                    "errorDetail",
                    "keys",
                ],
                "properties": {
                    "correlationId": {"type": "string"},
                    "requestType": {"type": "string"},
                    "status": {"type": "string", "enum": STATUSES},
                    "result": {"nullable": True},
                    "errorDetail": _nullable({"type": "string"}),
                    "keys": {"type": "object", "additionalProperties": {"type": "string"}},
                },
            },
        },
    },
    "RuntimeStatus": {
        "type": "object",
        "required": ["paused", "updatedAt"],
        "properties": {
            "paused": {"type": "boolean"},
            "updatedAt": _nullable({"type": "string", "format": "date-time"}),
            "bookmarkQueue": {
                "type": "object",
                "description": "stimuli waiting for delivery, and those delivered and kept for "
                "deduplication",
                "properties": {
                    "waiting": {"type": "integer"},
                    "delivered": {"type": "integer"},
                },
            },
        },
    },
}


def _page_of(item: str) -> dict[str, Any]:
    return {
        "type": "object",
        "required": ["items", "totalCount", "page", "pageSize"],
        "properties": {
            "items": {"type": "array", "items": _ref(item)},
            "totalCount": {"type": "integer"},
            "page": {"type": "integer"},
            "pageSize": {"type": "integer"},
        },
    }


REQUEST_ID = _path("id", "the request's correlation id")
DEAD_LETTER_ID = _path("id", "the dead letter's id")
INSTANCE_ID = _path("id", "the workflow instance's id")
ENDPOINT_ID = _path("id", "the webhook endpoint's id")
_PRINTABLE = "[^\\x00-\\x1f\\x7f-\\x9f/]"
#: an Elsa event name is free text: any printable characters, not only blanks
EVENT_NAME = {
    **_path("name", "the event name (percent-encoded in the path)"),
    "schema": {
        "type": "string",
        "minLength": 1,
        "maxLength": NAME_MAX,
        "pattern": f"^{_PRINTABLE}*[^\\x00-\\x20\\x7f-\\x9f/]{_PRINTABLE}*$",
    },
}

PATHS: dict[str, Any] = {
    "/requests": {
        "post": {
            "summary": "Submit a request",
            "tags": ["requests"],
            "parameters": [
                {
                    "name": "Idempotency-Key",
                    "in": "header",
                    "required": False,
                    "description": "same key and body again answers the first record",
                    "schema": {
                        "type": "string",
                        "minLength": 1,
                        "maxLength": NAME_MAX,
                        "pattern": "^[!-~]([ -~]*[!-~])?$",
                    },
                }
            ],
            "requestBody": {"required": True, "content": {JSON: {"schema": _ref("Submission")}}},
            "responses": _responses(
                {
                    202: _body(
                        _ref("Accepted"),
                        "Accepted and queued",
                        headers={
                            "Location": {
                                "schema": {"type": "string"},
                                "description": "/requests/{correlationId}",
                            }
                        },
                    ),
                    200: _body(_ref("Request"), "An idempotent retry: the first record"),
                },
                400,
                409,
                413,
                415,
                429,
            ),
        },
        "get": {
            "summary": "List this client's requests, newest first",
            "tags": ["requests"],
            "parameters": [
                _query("status", {"type": "string", "enum": STATUSES}, "filter by status"),
                _query("requestType", {"type": "string", "maxLength": NAME_MAX}, "filter by type"),
                _query(
                    "since",
                    {"type": "string", "format": "date-time"},
                    "submitted at or after (ISO 8601)",
                ),
                _query("limit", {"type": "integer", "minimum": 1, "maximum": 500}, "page size"),
                _query(
                    "cursor",
                    {"type": "string", "maxLength": NAME_MAX},
                    "the `next` of the previous page",
                ),
            ],
            "responses": _responses({200: _body(_ref("RequestPage"), "One page")}, 400),
        },
    },
    "/requests/{id}": {
        "get": {
            "summary": "One request",
            "tags": ["requests"],
            "parameters": [REQUEST_ID],
            "responses": _responses({200: _body(_ref("Request"), "The request")}, 403, 404),
        }
    },
    "/requests/{id}/events": {
        "get": {
            "summary": "The request's audit history",
            "tags": ["requests"],
            "parameters": [REQUEST_ID],
            "responses": _responses(
                {200: _body({"type": "array", "items": _ref("AuditEvent")}, "Oldest first")},
                403,
                404,
            ),
        }
    },
    "/requests/{id}/cancel": {
        "post": {
            "summary": "Cancel the request and its workflows",
            "tags": ["requests"],
            "parameters": [REQUEST_ID],
            "responses": _responses({202: _body(_ref("Accepted"), "Cancelled")}, 403, 404, 409),
        }
    },
    "/events/{name}": {
        "post": {
            "summary": "Resume the workflows waiting on an event; start those it triggers",
            "tags": ["events"],
            "parameters": [EVENT_NAME],
            "requestBody": {"required": True, "content": {JSON: {"schema": _ref("Stimulus")}}},
            "responses": _responses(
                {202: _body(_ref("QueueItem"), "Queued")}, 400, 404, 413, 415, 429
            ),
        }
    },
    "/request-types": {
        "get": {
            "summary": "The request types this client may submit",
            "tags": ["requests"],
            "responses": _responses({200: _body(_ref("RequestTypes"), "Rules and workflows")}),
        }
    },
    "/webhooks": {
        "post": {
            "summary": "Register a webhook endpoint (the secret is answered only now)",
            "tags": ["webhooks"],
            "requestBody": {
                "required": True,
                "content": {JSON: {"schema": _ref("WebhookEndpointRequest")}},
            },
            "responses": _responses(
                {
                    201: _body(
                        _ref("WebhookEndpointWithSecret"),
                        "Registered",
                        headers={
                            "Location": {
                                "schema": {"type": "string"},
                                "description": "/webhooks/{id}",
                            }
                        },
                    )
                },
                400,
                413,
            ),
        },
        "get": {
            "summary": "This client's webhook endpoints (never their secrets)",
            "tags": ["webhooks"],
            "responses": _responses({200: _body(_ref("WebhookEndpoints"), "The endpoints")}),
        },
    },
    "/webhooks/{id}": {
        "parameters": [ENDPOINT_ID],
        "get": {
            "summary": "One of this client's webhook endpoints",
            "tags": ["webhooks"],
            "responses": _responses({200: _body(_ref("WebhookEndpoint"), "The endpoint")}, 404),
        },
        "delete": {
            "summary": "Remove an endpoint registered through the API",
            "tags": ["webhooks"],
            "responses": _responses({204: {"description": "Removed"}}, 404, 409),
        },
    },
    "/webhooks/{id}/rotate-secret": {
        "parameters": [ENDPOINT_ID],
        "post": {
            "summary": "A new signing secret; the previous one signs too for the overlap",
            "tags": ["webhooks"],
            "responses": _responses(
                {200: _body(_ref("WebhookEndpointWithSecret"), "Rotated")}, 404, 409
            ),
        },
    },
    "/webhooks/{id}/deliveries": {
        "parameters": [ENDPOINT_ID],
        "get": {
            "summary": "The endpoint's last delivery attempts, newest first",
            "tags": ["webhooks"],
            "parameters": [
                _query("limit", {"type": "integer", "minimum": 1, "maximum": 500}, "how many")
            ],
            "responses": _responses(
                {200: _body(_ref("WebhookAttempts"), "The delivery log")}, 400, 404
            ),
        },
    },
    "/admin/bookmark-queue/dead-letters": {
        "get": _scoped(
            "read:bookmark-queue:dead-letters",
            "Bookmark-queue dead letters",
            {200: _body(_page_of("DeadLetter"), "One page")},
            400,
            parameters=[
                *PAGE,
                _query("workflowInstanceId", {"type": "string", "maxLength": NAME_MAX}, "filter"),
            ],
        )
    },
    "/admin/bookmark-queue/dead-letters/{id}": {
        "parameters": [DEAD_LETTER_ID],
        "get": _scoped(
            "read:bookmark-queue:dead-letters",
            "One bookmark-queue dead letter",
            {200: _body(_ref("DeadLetter"), "The dead letter")},
            404,
        ),
        "delete": _scoped(
            "delete:bookmark-queue:dead-letters",
            "Delete a dead letter",
            {204: {"description": "Deleted"}},
            404,
        ),
    },
    "/admin/bookmark-queue/dead-letters/{id}/replay": {
        "parameters": [DEAD_LETTER_ID],
        "post": _scoped(
            "replay:bookmark-queue:dead-letters",
            "Replay as a new queue item",
            {200: _body(_ref("Replayed"), "Replayed")},
            404,
            409,
        ),
    },
    "/admin/dead-letters": {
        "get": _scoped(
            "read:dead-letters",
            "Request, outbox and webhook dead letters",
            {200: _body(_page_of("DeadLetter"), "One page")},
            400,
            parameters=[
                *PAGE,
                _query(
                    "kind",
                    {"type": "string", "enum": ["request", "outbox", "webhook"]},
                    "request, outbox or webhook; all three when absent",
                ),
            ],
        )
    },
    "/admin/dead-letters/{id}": {
        "parameters": [DEAD_LETTER_ID],
        "get": _scoped(
            "read:dead-letters",
            "One dead letter",
            {200: _body(_ref("DeadLetter"), "The dead letter")},
            404,
        ),
    },
    "/admin/dead-letters/{id}/replay": {
        "parameters": [DEAD_LETTER_ID],
        "post": _scoped(
            "replay:dead-letters",
            "Replay: the request resumes, the task or the webhook is sent again",
            {200: _body(_ref("Replayed"), "Replayed")},
            404,
            409,
        ),
    },
    "/admin/workflow-instances": {
        "get": _scoped(
            "read:workflow-instances",
            "Workflow instances",
            {200: _body(_page_of("Instance"), "One page")},
            400,
            parameters=[
                *PAGE,
                _query("status", {"type": "string", "maxLength": NAME_MAX}, "status or sub-status"),
                _query("definitionId", {"type": "string", "maxLength": NAME_MAX}, "filter"),
            ],
        )
    },
    "/admin/workflow-instances/{id}": {
        "parameters": [INSTANCE_ID],
        "get": _scoped(
            "read:workflow-instances",
            "One instance",
            {200: _body(_ref("Instance"), "The instance")},
            404,
        ),
    },
    "/admin/workflow-instances/{id}/journal": {
        "parameters": [INSTANCE_ID],
        "get": _scoped(
            "read:workflow-instances",
            "The execution journal",
            {
                200: _body(
                    {
                        "type": "object",
                        "required": ["items"],
                        "properties": {"items": {"type": "array", "items": _ref("JournalEntry")}},
                    },
                    "In order",
                )
            },
            404,
        ),
    },
    "/admin/workflow-instances/{id}/cancel": {
        "parameters": [INSTANCE_ID],
        "post": _scoped(
            "cancel:workflow-instances",
            "Cancel the instance and its children",
            {202: _body(_ref("Instance"), "Cancelled")},
            404,
            409,
        ),
    },
    "/admin/workflow-runtime/status": {
        "get": _scoped(
            "read:workflow-runtime",
            "Whether new work is paused",
            {200: _body(_ref("RuntimeStatus"), "Status")},
        )
    },
    "/admin/workflow-runtime/pause": {
        "post": _scoped(
            "manage:workflow-runtime",
            "Pause new submissions (POST /requests answers 503)",
            {200: _body(_ref("RuntimeStatus"), "Paused")},
        )
    },
    "/admin/workflow-runtime/resume": {
        "post": _scoped(
            "manage:workflow-runtime",
            "Resume new submissions",
            {200: _body(_ref("RuntimeStatus"), "Resumed")},
        )
    },
    "/openapi.json": {
        "get": {
            "summary": "This document",
            "tags": ["meta"],
            "responses": {"200": _body({"type": "object"}, "OpenAPI 3 document")},
        }
    },
}


def document() -> dict[str, Any]:
    """The OpenAPI document (a fresh dict; callers may change it)."""
    return {
        "openapi": "3.0.3",
        "info": {
            "title": "Elsa Celery broker",
            "version": __version__,
            "description": "Mutual TLS: the client is the verified client certificate. Admin "
            "operations name their scope in `x-required-scope`.",
        },
        "paths": PATHS,
        "components": {
            "schemas": SCHEMAS,
            "responses": {
                **{
                    f"E{code}": _body(_ref("Error"), text, **_error_headers(code))
                    for code, text in ERRORS.items()
                },
                # Answered by gunicorn before the app sees the request, hence not JSON.
                "E414": {
                    "description": "The request line (path and query) is over gunicorn's "
                    "limit of 4094 bytes",
                    "content": {"text/html": {"schema": {"type": "string"}}},
                },
            },
        },
    }


def _error_headers(code: int) -> dict[str, Any]:
    if code != 429:
        return {}
    seconds = {"schema": {"type": "integer", "minimum": 1}, "description": "seconds to wait"}
    return {"headers": {"Retry-After": seconds}}


@bp.get("/openapi.json")
def document_view() -> Response:
    return jsonify(document())

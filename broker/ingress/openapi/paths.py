"""The paths of the OpenAPI document: one entry per route the public listener serves."""

from __future__ import annotations

from typing import Any

from broker.clients import scopes
from broker.ingress.openapi.components import JSON, NAME_MAX, STATUSES, body, page_of, ref


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
                },
                {
                    "name": "X-Correlation-ID",
                    "in": "header",
                    "required": False,
                    "description": "the client's correlation id (as Elsa's HTTP workflows read "
                    "it): the workflow instance is correlated with it, events addressed to it "
                    "resume it, and the Correlation activation strategies compare it",
                    "schema": {
                        "type": "string",
                        "minLength": 1,
                        "maxLength": NAME_MAX,
                        "pattern": "^[!-~]([ -~]*[!-~])?$",
                    },
                },
            ],
            "requestBody": {"required": True, "content": {JSON: {"schema": ref("Submission")}}},
            "responses": _responses(
                {
                    202: body(
                        ref("Accepted"),
                        "Accepted and queued",
                        headers={
                            "Location": {
                                "schema": {"type": "string"},
                                "description": "/requests/{correlationId}",
                            }
                        },
                    ),
                    200: body(ref("Request"), "An idempotent retry: the first record"),
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
            "responses": _responses({200: body(ref("RequestPage"), "One page")}, 400),
        },
    },
    "/requests/{id}": {
        "get": {
            "summary": "One request",
            "tags": ["requests"],
            "parameters": [REQUEST_ID],
            "responses": _responses({200: body(ref("Request"), "The request")}, 403, 404),
        }
    },
    "/requests/{id}/events": {
        "get": {
            "summary": "The request's audit history",
            "tags": ["requests"],
            "parameters": [REQUEST_ID],
            "responses": _responses(
                {200: body({"type": "array", "items": ref("AuditEvent")}, "Oldest first")},
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
            "responses": _responses({202: body(ref("Accepted"), "Cancelled")}, 403, 404, 409),
        }
    },
    "/events/{name}": {
        "post": {
            "summary": "Resume the workflows waiting on an event; start those it triggers",
            "tags": ["events"],
            "parameters": [EVENT_NAME],
            "requestBody": {"required": True, "content": {JSON: {"schema": ref("Stimulus")}}},
            "responses": _responses(
                {202: body(ref("QueueItem"), "Queued")}, 400, 404, 413, 415, 429
            ),
        }
    },
    "/webhook-events": {
        "post": {
            "summary": "Receive a webhook event (Elsa.Webhooks): resume the workflows waiting for "
            "its type; start those it triggers",
            "tags": ["events"],
            "requestBody": {
                "required": True,
                "content": {JSON: {"schema": ref("InboundWebhookEvent")}},
            },
            "responses": _responses({202: body(ref("QueueItem"), "Queued")}, 400, 413, 415, 429),
        }
    },
    "/request-types": {
        "get": {
            "summary": "The request types this client may submit",
            "tags": ["requests"],
            "responses": _responses({200: body(ref("RequestTypes"), "Rules and workflows")}),
        }
    },
    "/webhooks": {
        "post": {
            "summary": "Register a webhook endpoint (the secret is answered only now)",
            "tags": ["webhooks"],
            "requestBody": {
                "required": True,
                "content": {JSON: {"schema": ref("WebhookEndpointRequest")}},
            },
            "responses": _responses(
                {
                    201: body(
                        ref("WebhookEndpointWithSecret"),
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
            "responses": _responses({200: body(ref("WebhookEndpoints"), "The endpoints")}),
        },
    },
    "/webhooks/{id}": {
        "parameters": [ENDPOINT_ID],
        "get": {
            "summary": "One of this client's webhook endpoints",
            "tags": ["webhooks"],
            "responses": _responses({200: body(ref("WebhookEndpoint"), "The endpoint")}, 404),
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
                {200: body(ref("WebhookEndpointWithSecret"), "Rotated")}, 404, 409
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
                {200: body(ref("WebhookAttempts"), "The delivery log")}, 400, 404
            ),
        },
    },
    "/admin/bookmark-queue/dead-letters": {
        "get": _scoped(
            scopes.READ_BOOKMARK_DEAD_LETTERS,
            "Bookmark-queue dead letters",
            {200: body(page_of("DeadLetter"), "One page")},
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
            scopes.READ_BOOKMARK_DEAD_LETTERS,
            "One bookmark-queue dead letter",
            {200: body(ref("DeadLetter"), "The dead letter")},
            404,
        ),
        "delete": _scoped(
            scopes.DELETE_BOOKMARK_DEAD_LETTERS,
            "Delete a dead letter",
            {204: {"description": "Deleted"}},
            404,
        ),
    },
    "/admin/bookmark-queue/dead-letters/{id}/replay": {
        "parameters": [DEAD_LETTER_ID],
        "post": _scoped(
            scopes.REPLAY_BOOKMARK_DEAD_LETTERS,
            "Replay as a new queue item",
            {200: body(ref("Replayed"), "Replayed")},
            404,
            409,
        ),
    },
    "/admin/dead-letters": {
        "get": _scoped(
            scopes.READ_DEAD_LETTERS,
            "Request, outbox and webhook dead letters",
            {200: body(page_of("DeadLetter"), "One page")},
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
            scopes.READ_DEAD_LETTERS,
            "One dead letter",
            {200: body(ref("DeadLetter"), "The dead letter")},
            404,
        ),
    },
    "/admin/dead-letters/{id}/replay": {
        "parameters": [DEAD_LETTER_ID],
        "post": _scoped(
            scopes.REPLAY_DEAD_LETTERS,
            "Replay: the request resumes, the task or the webhook is sent again",
            {200: body(ref("Replayed"), "Replayed")},
            404,
            409,
        ),
    },
    "/admin/workflow-instances": {
        "get": _scoped(
            scopes.READ_INSTANCES,
            "Workflow instances",
            {200: body(page_of("Instance"), "One page")},
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
            scopes.READ_INSTANCES,
            "One instance",
            {200: body(ref("Instance"), "The instance")},
            404,
        ),
    },
    "/admin/workflow-instances/{id}/journal": {
        "parameters": [INSTANCE_ID],
        "get": _scoped(
            scopes.READ_INSTANCES,
            "The execution journal",
            {
                200: body(
                    {
                        "type": "object",
                        "required": ["items"],
                        "properties": {"items": {"type": "array", "items": ref("JournalEntry")}},
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
            scopes.CANCEL_INSTANCES,
            "Cancel the instance and its children",
            {202: body(ref("Instance"), "Cancelled")},
            404,
            409,
        ),
    },
    "/admin/workflow-runtime/status": {
        "get": _scoped(
            scopes.READ_RUNTIME,
            "Whether new work is paused",
            {200: body(ref("RuntimeStatus"), "Status")},
        )
    },
    "/admin/workflow-runtime/pause": {
        "post": _scoped(
            scopes.MANAGE_RUNTIME,
            "Pause new submissions (POST /requests answers 503)",
            {200: body(ref("RuntimeStatus"), "Paused")},
        )
    },
    "/admin/workflow-runtime/resume": {
        "post": _scoped(
            scopes.MANAGE_RUNTIME,
            "Resume new submissions",
            {200: body(ref("RuntimeStatus"), "Resumed")},
        )
    },
    "/openapi.json": {
        "get": {
            "summary": "This document",
            "tags": ["meta"],
            "responses": {"200": body({"type": "object"}, "OpenAPI 3 document")},
        }
    },
}

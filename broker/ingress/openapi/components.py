"""The components of the OpenAPI document: the schemas of bodies and the error responses.

``broker.ingress.openapi`` assembles them with the paths (``openapi.paths``).
"""

from __future__ import annotations

from typing import Any

from broker.runtime.admin.enums import RequestStatus

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


def ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def nullable(schema: dict[str, Any]) -> dict[str, Any]:
    return {**schema, "nullable": True}


def body(schema: dict[str, Any], description: str, **extra: Any) -> dict[str, Any]:
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

NAME = {"type": "string", "minLength": 1, "maxLength": NAME_MAX}


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
            "payload": nullable({"type": "object"}),
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
            "errorDetail": nullable({"type": "string"}),
            "submittedAt": {"type": "string", "format": "date-time"},
            "updatedAt": {"type": "string", "format": "date-time"},
            "workflow": {
                "type": "object",
                "required": ["definitionId", "version", "instanceId", "subStatus"],
                "properties": {
                    "definitionId": nullable({"type": "string"}),
                    "version": nullable({"type": "integer"}),
                    "instanceId": nullable({"type": "string"}),
                    "subStatus": nullable({"type": "string"}),
                    "instanceName": nullable({"type": "string"}),
                    "instanceCorrelationId": nullable({"type": "string"}),
                },
            },
        },
    },
    "RequestPage": {
        "type": "object",
        "required": ["items", "next"],
        "properties": {
            "items": {"type": "array", "items": ref("Request")},
            "next": nullable({"type": "string"}),
        },
    },
    "AuditEvent": {
        "type": "object",
        "required": ["timestamp", "eventType", "source", "message", "properties"],
        "properties": {
            "timestamp": {"type": "string", "format": "date-time"},
            "eventType": {"type": "string"},
            "source": {"type": "string"},
            "message": nullable({"type": "string"}),
            "properties": {"type": "object"},
        },
    },
    "Stimulus": {
        "type": "object",
        "required": ["correlationId"],
        "additionalProperties": False,
        "properties": {
            "correlationId": {**NAME, "pattern": "\\S"},
            "payload": nullable({"type": "object"}),
        },
    },
    "InboundWebhookEvent": {
        "type": "object",
        "required": ["eventType"],
        "additionalProperties": False,
        "properties": {
            "eventType": {**NAME, "pattern": "\\S"},
            "payload": {},
            "timestamp": nullable({"type": "string", "format": "date-time"}),
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
                        "workflow": nullable(
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
            "requestId": nullable({"type": "string"}),
            "workflowInstanceId": nullable({"type": "string"}),
            "activityId": nullable({"type": "string"}),
            "sourceId": nullable({"type": "string"}),
            "clientKey": nullable({"type": "string"}),
            "name": nullable({"type": "string"}),
            "error": nullable({"type": "string"}),
            "attempts": {"type": "integer"},
            "replayable": {"type": "boolean"},
            "replayedAt": nullable({"type": "string", "format": "date-time"}),
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
            "reason": nullable({"type": "string"}),
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
            "requestId": nullable({"type": "string"}),
            "parentId": nullable({"type": "string"}),
            "correlationId": nullable({"type": "string"}),
            "name": nullable({"type": "string"}),
            "status": {"type": "string"},
            "subStatus": {"type": "string"},
            "incidentCount": {"type": "integer"},
            "fault": nullable({"type": "object"}),
            "createdAt": {"type": "string", "format": "date-time"},
            "updatedAt": {"type": "string", "format": "date-time"},
            "finishedAt": nullable({"type": "string", "format": "date-time"}),
        },
    },
    "JournalEntry": {
        "type": "object",
        "required": ["sequence", "activityId", "eventName", "timestamp"],
        "properties": {
            "sequence": {"type": "integer"},
            "activityId": {"type": "string"},
            "activityInstanceId": nullable({"type": "string"}),
            "activityType": {"type": "string"},
            "activityName": nullable({"type": "string"}),
            "eventName": {"type": "string"},
            "outcome": nullable({"type": "string"}),
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
            "disabled": nullable(
                {
                    "type": "object",
                    "description": "why the endpoint was disabled (e.g. it failed for the "
                    "whole retry horizon)",
                    "properties": {
                        "reason": nullable({"type": "string"}),
                        "at": nullable({"type": "string", "format": "date-time"}),
                    },
                }
            ),
            "failingSince": nullable({"type": "string", "format": "date-time"}),
            "createdAt": {"type": "string", "format": "date-time"},
        },
    },
    "WebhookEndpointWithSecret": {
        "allOf": [
            ref("WebhookEndpoint"),
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
        "properties": {"items": {"type": "array", "items": ref("WebhookEndpoint")}},
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
            "correlationId": nullable({"type": "string"}),
            "attempt": {"type": "integer"},
            "attemptedAt": {"type": "string", "format": "date-time"},
            "statusCode": nullable({"type": "integer"}),
            "latencyMs": {"type": "integer"},
            "outcome": {"type": "string", "enum": ["delivered", "retry", "dead"]},
            "error": nullable({"type": "string"}),
            "deliveryState": {"type": "string", "enum": ["pending", "delivered", "dead"]},
            "nextAttemptAt": nullable({"type": "string", "format": "date-time"}),
        },
    },
    "WebhookAttempts": {
        "type": "object",
        "required": ["items"],
        "properties": {"items": {"type": "array", "items": ref("WebhookAttempt")}},
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
                    "errorDetail": nullable({"type": "string"}),
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
            "updatedAt": nullable({"type": "string", "format": "date-time"}),
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


def page_of(item: str) -> dict[str, Any]:
    return {
        "type": "object",
        "required": ["items", "totalCount", "page", "pageSize"],
        "properties": {
            "items": {"type": "array", "items": ref(item)},
            "totalCount": {"type": "integer"},
            "page": {"type": "integer"},
            "pageSize": {"type": "integer"},
        },
    }

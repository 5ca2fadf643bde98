"""Reading and validating request bodies and query strings (docs/design.md, section 1)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from flask import request

from broker.errors import BadRequest
from broker.runtime.admin.enums import RequestStatus
from broker.runtime.requests.queries import ListQuery
from broker.runtime.requests.submission import Submission
from broker.safety.bounded import parse_int

MAX_NAME = 200  # the width of the name columns (request type, idempotency key, event name)

SUBMISSION_FIELDS = frozenset({"requestType", "keys", "payload", "callbackUrl"})
EVENT_FIELDS = frozenset({"correlationId", "payload"})
#: Elsa.Webhooks' ``WebhookEvent``
WEBHOOK_EVENT_FIELDS = frozenset({"eventType", "payload", "timestamp"})
CALLBACK_FIELDS = frozenset({"status", "result", "error"})


def _object(document: Any, allowed: frozenset[str]) -> dict[str, Any]:
    if not isinstance(document, dict):
        raise BadRequest("Request body must be a JSON object", field="body")
    unknown = sorted(set(document) - allowed)
    if unknown:
        raise BadRequest("Unknown fields", field="body", fields=unknown)
    return document


def _name(value: Any, field: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise BadRequest(f"{field} must be a non-empty string", field=field)
    if len(value) > MAX_NAME:
        raise BadRequest(f"{field} is longer than {MAX_NAME} characters", field=field)
    return value


def _payload(value: Any) -> dict[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise BadRequest("payload must be a JSON object", field="payload")
    return value


def parse_submission(
    document: Any, idempotency_key: str | None, *, correlation_id: str | None = None
) -> Submission:
    """A ``POST /requests`` body: requestType, keys (strings only) and an optional payload;
    ``correlation_id``: the client's own, from the ``X-Correlation-ID`` header (as Elsa's HTTP
    workflows read it), which the workflow instance is correlated with."""
    body = _object(document, SUBMISSION_FIELDS)
    request_type = _name(body.get("requestType"), "requestType")
    keys = body.get("keys", {})
    if keys is None:
        keys = {}
    if not isinstance(keys, dict):
        raise BadRequest("keys must be a JSON object of string values", field="keys")
    not_strings = sorted(k for k, v in keys.items() if not isinstance(v, str))
    if not_strings:
        raise BadRequest("Key values must be strings", field="keys", keys=not_strings)
    if idempotency_key is not None:
        idempotency_key = _name(idempotency_key, "Idempotency-Key")
        if not idempotency_key.isprintable():
            raise BadRequest("Idempotency-Key must be printable", field="Idempotency-Key")
    if correlation_id is not None:
        correlation_id = _name(correlation_id, "X-Correlation-ID")
        if not correlation_id.isprintable():
            raise BadRequest("X-Correlation-ID must be printable", field="X-Correlation-ID")
    return Submission(
        request_type=request_type,
        keys=keys,
        payload=_payload(body.get("payload")),
        idempotency_key=idempotency_key,
        callback_url=_callback_url(body.get("callbackUrl")),
        correlation_id=correlation_id,
    )


def _callback_url(value: Any) -> str | None:
    """The optional one-off ``callbackUrl`` (the outbound guard checks it later)."""
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip().lower().startswith(("http://", "https://")):
        raise BadRequest("callbackUrl must be an http:// or https:// URL", field="callbackUrl")
    return value.strip()


def check_keys(
    keys: Mapping[str, str], required: tuple[str, ...] | list[str], allow_additional: bool
) -> tuple[list[str], list[str]]:
    """(missing, unexpected) key names for a request type's rule; blank values count missing.

    Names compare case-insensitively, as elsa-broker's ``StringComparer.OrdinalIgnoreCase``:
    ``invoicenumber`` satisfies ``InvoiceNumber``. The keys are stored and handed to the workflow
    exactly as the client sent them (elsa-broker serializes the submitted dictionary unchanged).
    """
    present: dict[str, bool] = {}
    for name, value in keys.items():
        folded = ordinal_fold(name)
        present[folded] = present.get(folded, False) or bool(value.strip())
    wanted = {ordinal_fold(k) for k in required}
    missing = [k for k in required if not present.get(ordinal_fold(k), False)]
    unexpected = (
        [] if allow_additional else sorted(k for k in keys if ordinal_fold(k) not in wanted)
    )
    return missing, unexpected


def ordinal_fold(name: str) -> str:
    """``name`` with each character upper-cased alone (.NET's ordinal ignore-case comparison).

    .NET maps character by character with the simple case mapping; Python's ``upper`` uses the
    full one (``ß`` becomes ``SS``), so a character whose upper case is longer stays as it is.
    """
    if name.isascii():
        return name.upper()  # every ASCII letter maps to one letter: the same answer, at C speed
    return "".join(u if len(u := c.upper()) == 1 else c for c in name)


def parse_event(document: Any) -> tuple[str, dict[str, Any] | None]:
    """A ``POST /events/{name}`` body: (correlationId, payload)."""
    body = _object(document, EVENT_FIELDS)
    return _name(body.get("correlationId"), "correlationId"), _payload(body.get("payload"))


def parse_webhook_event(document: Any) -> dict[str, Any]:
    """A ``POST /webhook-events`` body, Elsa's ``WebhookEvent``: ``{eventType, payload?,
    timestamp?}`` (the payload any JSON value, the timestamp ISO 8601 text)."""
    body = _object(document, WEBHOOK_EVENT_FIELDS)
    event_type = _name(body.get("eventType"), "eventType")
    if not event_type.isprintable():
        raise BadRequest("eventType must not contain control characters", field="eventType")
    timestamp = body.get("timestamp")
    if timestamp is not None:
        if not isinstance(timestamp, str):
            raise BadRequest("timestamp must be ISO 8601 text", field="timestamp")
        try:
            dt.datetime.fromisoformat(timestamp)
        except ValueError as exc:
            raise BadRequest("timestamp must be ISO 8601 text", field="timestamp") from exc
    return {"eventType": event_type, "payload": body.get("payload"), "timestamp": timestamp}


def parse_callback(document: Any) -> tuple[RequestStatus, Any, str | None]:
    """An internal ``.../result`` body: (status, result, error)."""
    body = _object(document, CALLBACK_FIELDS)
    status = body.get("status")
    if status not in (RequestStatus.COMPLETED.value, RequestStatus.FAULTED.value):
        raise BadRequest("status must be Completed or Faulted", field="status")
    error = body.get("error")
    if error is not None and not isinstance(error, str):
        raise BadRequest("error must be a string", field="error")
    return RequestStatus(status), body.get("result"), error


# Query strings ------------------------------------------------------------------------------------


def int_arg(name: str, default: int, low: int, high: int) -> int:
    raw = request.args.get(name)
    if raw is None or raw == "":
        return default
    return parse_int(raw, name, low=low, high=high)


def str_arg(name: str) -> str | None:
    raw = request.args.get(name)
    if raw is None or raw == "":
        return None
    if len(raw) > MAX_NAME:
        raise BadRequest(f"{name} is longer than {MAX_NAME} characters", field=name)
    return raw


def time_arg(name: str) -> dt.datetime | None:
    raw = str_arg(name)
    if raw is None:
        return None
    try:
        value = dt.datetime.fromisoformat(raw)
    except ValueError as exc:
        raise BadRequest(f"{name} must be an ISO 8601 timestamp", field=name) from exc
    return value.replace(tzinfo=dt.UTC) if value.tzinfo is None else value


def status_arg(name: str = "status") -> str | None:
    raw = str_arg(name)
    if raw is None:
        return None
    for status in RequestStatus:
        if raw.lower() == status.value.lower():
            return status.value
    raise BadRequest(
        f"{name} must be one of {', '.join(s.value for s in RequestStatus)}", field=name
    )


def list_query() -> ListQuery:
    """The filters of ``GET /requests``."""
    return ListQuery(
        status=status_arg(),
        request_type=str_arg("requestType"),
        since=time_arg("since"),
        limit=int_arg("limit", 50, 1, 500),
        cursor=str_arg("cursor"),
    )

"""Completion webhooks (Standard Webhooks): endpoints, and the events a status change writes.

A client registers endpoints in clients.json (kept in step with the ``webhook_endpoints`` table by
``sync_configured``) or through ``POST /webhooks``; a submission may name a one-off
``callbackUrl``. Every request status change calls ``record_status_change`` in its own
transaction: for each of the client's enabled endpoints that wants the event it writes a delivery
row (the exact body, a ``webhook-id`` stable across retries) and the outbox row of its first
attempt, so a webhook is sent only for a change that committed and is never lost after one.
``broker.runtime.webhooks.delivery`` sends the attempts. Functions here take a session and never
commit.

``endpoints`` manages the endpoints and their secrets; ``events`` writes what a status change
sends.
"""

from broker.runtime.webhooks.endpoints import (
    MAX_URL_LENGTH,
    REMOVED_FROM_FILE,
    SOURCE_API,
    SOURCE_CALLBACK,
    SOURCE_CONFIG,
    UrlVetter,
    add_callback,
    callback_secret_of,
    check_url,
    config_endpoint_id,
    delete,
    endpoint_view,
    get_owned,
    list_endpoints,
    live_secrets,
    new_secret,
    register,
    rotate_secret,
    sync_configured,
)
from broker.runtime.webhooks.events import (
    EVENT_OF_STATUS,
    endpoints_condition,
    enqueue_attempt,
    event_body,
    known_endpoints,
    record_status_change,
)

__all__ = [
    "EVENT_OF_STATUS",
    "MAX_URL_LENGTH",
    "REMOVED_FROM_FILE",
    "SOURCE_API",
    "SOURCE_CALLBACK",
    "SOURCE_CONFIG",
    "UrlVetter",
    "add_callback",
    "callback_secret_of",
    "check_url",
    "config_endpoint_id",
    "delete",
    "endpoint_view",
    "endpoints_condition",
    "enqueue_attempt",
    "event_body",
    "get_owned",
    "known_endpoints",
    "list_endpoints",
    "live_secrets",
    "new_secret",
    "record_status_change",
    "register",
    "rotate_secret",
    "sync_configured",
]

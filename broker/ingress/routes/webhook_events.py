"""``POST /webhook-events``: an inbound webhook event (Elsa.Webhooks' ``WebhookEvent``) for this
client's workflows: it resumes their WebhookEventReceived waits and starts the workflows whose
trigger it matches (docs/design.md, "Inbound webhook events")."""

from __future__ import annotations

import logging
import uuid

from flask import Blueprint, Response, jsonify

from broker.ingress import rate_limits
from broker.ingress.auth import authenticate
from broker.ingress.schemas import parse_webhook_event
from broker.rates import EVENTS
from broker.registry.triggers import WEBHOOK_EVENT
from broker.runtime.bookmarks.queue import enqueue_stimulus
from broker.web.context import services, transaction
from broker.web.inputs import read_json

logger = logging.getLogger(__name__)

bp = Blueprint("webhook_events", __name__)


@bp.post("/webhook-events")
def receive_webhook_event() -> tuple[Response, int]:
    # The sender is an allowlisted mTLS client, as for every route of this listener: an event
    # reaches only that client's instances and the request types it may submit.
    client = authenticate()
    rate_limits.enforce(EVENTS, client)
    event = parse_webhook_event(read_json(services().settings))
    item_id = str(uuid.uuid4())
    with transaction() as session:
        enqueue_stimulus(
            session,
            item_id=item_id,
            name=WEBHOOK_EVENT,
            payload=event,
            client_key=client.client_id.lower(),
            stimulus={"eventType": event["eventType"]},
        )
    logger.info(
        "webhook event %s queued as %s",
        event["eventType"],
        item_id,
        extra={"queue_item_id": item_id, "client_id": client.client_id},
    )
    return jsonify({"queueItemId": item_id}), 202

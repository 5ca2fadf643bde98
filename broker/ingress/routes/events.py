"""``POST /events/{name}``: a stimulus for this client's workflows waiting on that event."""

from __future__ import annotations

import logging
import uuid

from flask import Blueprint, Response, jsonify

from broker.errors import BadRequest
from broker.ingress import rate_limits
from broker.ingress.auth import authenticate
from broker.ingress.schemas import MAX_NAME, parse_event
from broker.rates import EVENTS
from broker.runtime.bookmarks.queue import enqueue_stimulus
from broker.web.context import services, transaction
from broker.web.inputs import read_json

logger = logging.getLogger(__name__)

bp = Blueprint("events", __name__)


@bp.post("/events/<name>")
def publish_event(name: str) -> tuple[Response, int]:
    client = authenticate()
    rate_limits.enforce(EVENTS, client)
    if not name.strip() or len(name) > MAX_NAME:
        raise BadRequest(f"event name must be 1 to {MAX_NAME} characters", field="name")
    if not name.isprintable():
        raise BadRequest("event name must not contain control characters", field="name")
    correlation_id, payload = parse_event(read_json(services().settings))
    item_id = str(uuid.uuid4())
    with transaction() as session:
        # The item carries the caller, so it can only match bookmarks of this client's requests;
        # one that matches nothing yet stays queued until its TTL (a resume racing a suspend).
        enqueue_stimulus(
            session,
            item_id=item_id,
            name=name,
            correlation_id=correlation_id,
            client_key=client.client_id.lower(),
            payload=payload,
        )
    logger.info(
        "event %s queued as %s for correlation %s",
        name,
        item_id,
        correlation_id,
        extra={
            "queue_item_id": item_id,
            "correlation_id": correlation_id,
            "client_id": client.client_id,
        },
    )
    return jsonify({"queueItemId": item_id}), 202

"""``/webhooks``: a client's own webhook endpoints and their delivery log."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, jsonify, request

from broker.errors import BadRequest
from broker.ingress.auth import authenticate
from broker.runtime import webhooks
from broker.runtime.webhooks import delivery as webhook_delivery
from broker.safety.bounded import parse_int
from broker.web.context import services, transaction
from broker.web.inputs import read_json

bp = Blueprint("webhooks", __name__)

ENDPOINT_FIELDS = frozenset({"url", "events", "secret"})
MAX_LOG = 500


def outbound() -> Any:
    """The listener's outbound guard (the process's one ``OutboundHttp``)."""
    return services().shared().http


@bp.post("/webhooks")
def create() -> tuple[Response, int, dict[str, str]]:
    client = authenticate()
    body = read_json(services().settings)
    if not isinstance(body, dict):
        raise BadRequest("Request body must be a JSON object", field="body")
    unknown = sorted(set(body) - ENDPOINT_FIELDS)
    if unknown:
        raise BadRequest("Unknown fields", field="body", fields=unknown)
    with transaction() as session:
        endpoint, secret = webhooks.register(
            session,
            client_id=client.client_id,
            url=body.get("url"),
            events=body.get("events"),
            secret=body.get("secret"),
            vetter=outbound(),
        )
        view = {**webhooks.endpoint_view(endpoint), "secret": secret}
    return jsonify(view), 201, {"Location": f"/webhooks/{view['id']}"}


@bp.get("/webhooks")
def list_endpoints() -> Response:
    client = authenticate()
    with transaction(write=False) as session:
        items = [
            webhooks.endpoint_view(e) for e in webhooks.list_endpoints(session, client.client_id)
        ]
    return jsonify({"items": items})


@bp.get("/webhooks/<endpoint_id>")
def get_endpoint(endpoint_id: str) -> Response:
    client = authenticate()
    with transaction(write=False) as session:
        view = webhooks.endpoint_view(webhooks.get_owned(session, endpoint_id, client.client_id))
    return jsonify(view)


@bp.delete("/webhooks/<endpoint_id>")
def delete_endpoint(endpoint_id: str) -> tuple[str, int]:
    client = authenticate()
    with transaction() as session:
        webhooks.delete(session, endpoint_id, client.client_id)
    return "", 204


@bp.post("/webhooks/<endpoint_id>/rotate-secret")
def rotate_secret(endpoint_id: str) -> Response:
    client = authenticate()
    overlap = services().settings.webhook_secret_overlap
    with transaction() as session:
        secret = webhooks.rotate_secret(session, endpoint_id, client.client_id, overlap=overlap)
        view = webhooks.endpoint_view(webhooks.get_owned(session, endpoint_id, client.client_id))
    return jsonify({**view, "secret": secret, "previousSecretValidFor": overlap})


@bp.get("/webhooks/<endpoint_id>/deliveries")
def deliveries(endpoint_id: str) -> Response:
    client = authenticate()
    limit = _limit(request.args.get("limit"))
    with transaction(write=False) as session:
        webhooks.get_owned(session, endpoint_id, client.client_id)
        items = webhook_delivery.attempts_view(session, endpoint_id, limit=limit)
    return jsonify({"items": items})


def _limit(text: str | None) -> int:
    if text is None:
        return 50
    return parse_int(text, "limit", low=1, high=MAX_LOG)

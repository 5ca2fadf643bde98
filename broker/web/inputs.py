"""What every route of the ingress and the console reads from a request the same way: the JSON
body through the broker's one bounded reader, and the refusal of a NUL in a path or query."""

from __future__ import annotations

from typing import Any

from flask import request
from werkzeug.exceptions import RequestEntityTooLarge

from broker.errors import BadRequest, PayloadTooLarge, UnsupportedMediaType
from broker.safety.bounded import JsonLimits, decode_json, unstorable_text
from broker.settings import Settings


def read_json(settings: Settings, limits: JsonLimits | None = None) -> Any:
    """The request body as JSON: the one intake of every JSON-accepting route of the ingress and
    the console, within ``limits`` (``body_limits`` by default; the size never above
    ``BROKER_MAX_BODY_BYTES``), read by the broker's one bounded JSON reader."""
    limit = settings.max_body_bytes
    if request.content_length is not None and request.content_length > limit:
        raise PayloadTooLarge(f"Request body exceeds {limit} bytes", limit=limit)
    if not is_json_media_type(request.mimetype):
        given = request.mimetype or "none"
        raise UnsupportedMediaType(
            f"Content-Type must be application/json (or a +json type), not {given}",
            field="Content-Type",
        )
    try:
        raw = request.get_data(cache=True)
    except RequestEntityTooLarge as exc:
        raise PayloadTooLarge(f"Request body exceeds {limit} bytes", limit=limit) from exc
    if len(raw) > limit:
        raise PayloadTooLarge(f"Request body exceeds {limit} bytes", limit=limit)
    if not raw.strip():
        raise BadRequest("Request body must be a JSON object", field="body")
    return decode_json(raw, limits or body_limits(settings))


def body_limits(settings: Settings) -> JsonLimits:
    """What a JSON request body may hold: ``BROKER_MAX_BODY_BYTES``, ``BROKER_MAX_JSON_DEPTH``
    and ``BROKER_MAX_JSON_KEYS``."""
    return JsonLimits(
        max_bytes=settings.max_body_bytes,
        max_depth=settings.max_json_depth,
        max_keys=settings.max_json_keys,
    )


def is_json_media_type(mimetype: str) -> bool:
    """Whether a (lower-case, parameter-free) media type is JSON: ``application/json`` or a
    structured-syntax ``+json`` type such as ``application/merge-patch+json``."""
    return mimetype == "application/json" or (
        "/" in mimetype and mimetype.endswith("+json") and not mimetype.startswith("/")
    )


def refuse_nul_in_url() -> None:
    """Raise ``BadRequest`` naming the path or query parameter that holds a NUL character.

    No id, name or filter may hold one, and PostgreSQL cannot even compare a text with it: the
    lookup would fail as an internal error instead of finding nothing.
    """
    fields = [*(request.view_args or {}).items(), *request.args.items(multi=True)]
    for field, value in fields:
        problem = unstorable_text(str(field)) or unstorable_text(str(value))
        if problem is not None:
            raise BadRequest(f"{field} must not contain {problem}", field=str(field))

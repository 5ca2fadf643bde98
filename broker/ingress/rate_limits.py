"""The ingress side of the rate limits (``broker.adapters.buckets``): one check per limited call."""

from __future__ import annotations

from flask import request
from werkzeug.exceptions import ClientDisconnected, RequestEntityTooLarge

from broker.adapters.buckets import RateLimiter
from broker.errors import RateLimited
from broker.ingress import metrics
from broker.rates import ClientLimits
from broker.web.context import ApiClientLike, services

LIMITER = "rate_limiter"  # the key of the limiter in ``Services.extra``
_CHUNK = 64 * 1024


def enforce(kind: str, client: ApiClientLike) -> None:
    """Take one of ``client``'s ``kind`` tokens, or raise ``RateLimited`` (429, Retry-After).

    The check comes before the body is parsed, so a refused call costs no JSON decoding and no
    database work; its body is still read (and dropped) so that the client, which may still be
    sending it, gets the 429 instead of a connection closed under it."""
    svc = services()
    limiter: RateLimiter | None = svc.extra.get(LIMITER)
    if limiter is None:
        return
    limits = getattr(client, "rate_limits", None)
    try:
        limiter.check(client.client_id, kind, limits if isinstance(limits, ClientLimits) else None)
    except RateLimited:
        metrics.REJECTED.labels(reason=f"rate_limited_{kind}").inc()
        _discard_body(svc.settings.max_body_bytes)
        raise


def _discard_body(limit: int) -> None:
    """Read the request body up to ``limit`` bytes and drop it (a larger one is left unread:
    it would be refused as 413 anyway)."""
    if request.content_length is not None and request.content_length > limit:
        return
    stream = request.stream
    remaining = limit + 1
    try:
        while remaining > 0:
            chunk = stream.read(min(_CHUNK, remaining))
            if not chunk:
                return
            remaining -= len(chunk)
    except (RequestEntityTooLarge, ClientDisconnected):
        return

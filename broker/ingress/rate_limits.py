"""The ingress side of the rate limits (``broker.rate_limits``): one check per limited call."""

from __future__ import annotations

from broker.errors import RateLimited
from broker.ingress import metrics
from broker.ingress.context import ApiClientLike, services
from broker.rate_limits import ClientLimits, RateLimiter

LIMITER = "rate_limiter"  # the key of the limiter in ``Services.extra``


def enforce(kind: str, client: ApiClientLike) -> None:
    """Take one of ``client``'s ``kind`` tokens, or raise ``RateLimited`` (429, Retry-After)."""
    limiter: RateLimiter | None = services().extra.get(LIMITER)
    if limiter is None:
        return
    limits = getattr(client, "rate_limits", None)
    try:
        limiter.check(client.client_id, kind, limits if isinstance(limits, ClientLimits) else None)
    except RateLimited:
        metrics.REJECTED.labels(reason=f"rate_limited_{kind}").inc()
        raise

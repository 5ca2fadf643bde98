"""Sign-in throttling per user name and per address, before any password is hashed, on the ingress's
shared rate-limit buckets (docs/design.md, "Console sign-in")."""

from __future__ import annotations

import hashlib
import logging

from flask import current_app, request

from broker.adapters.buckets import RateLimiter
from broker.errors import RateLimited

logger = logging.getLogger(__name__)

EXTENSION = "broker.console.sign_in_limiter"
#: the buckets' kinds: one per user name, one per address
USER = "sign-in-user"
ADDRESS = "sign-in-address"


def throttle(username: str | None) -> None:
    """Take this attempt's tokens (the address's, then the user name's), or raise
    ``RateLimited`` with the seconds after which to try again. Call it before any password is
    checked: a refused attempt costs no hashing."""
    limiter: RateLimiter | None = current_app.extensions.get(EXTENSION)
    if limiter is None:
        return
    address = request.remote_addr or "unknown"
    try:
        limiter.check(address, ADDRESS)
        if username:
            # A digest: any name fits a bucket's key (names are up to a kilobyte here).
            name = hashlib.sha256(username.strip().lower().encode()).hexdigest()[:32]
            limiter.check(name, USER)
    except RateLimited as exc:
        logger.warning(
            "console: sign-in attempts over the limit (%s), refused for %d s",
            "this user name" if exc.details.get("limit") == USER else "this address",
            exc.retry_after,
            extra={"remote_addr": address},
        )
        raise RateLimited(
            "Too many sign-in attempts; try again later",
            limit=str(exc.details.get("limit")),
            rate=str(exc.details.get("rate")),
            retry_after=exc.retry_after,
        ) from None

"""Signed, short-lived console tokens (JWT, HS256), as Elsa's identity module issues them."""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import time
from typing import Literal

import jwt

ISSUER = "broker-console"
AUDIENCE = "broker-console"
ALGORITHM = "HS256"
TokenType = Literal["access", "refresh"]
Kind = Literal["key", "user"]


@dataclasses.dataclass(frozen=True)
class Holder:
    """Whom a token was issued to."""

    kind: Kind
    name: str


@dataclasses.dataclass(frozen=True)
class Tokens:
    access_token: str
    refresh_token: str


def derive_key(secret: str, purpose: str) -> bytes:
    """A key for one purpose (tokens, sessions) derived from the console secret."""
    return hmac.new(secret.encode(), purpose.encode(), hashlib.sha256).digest()


class TokenIssuer:
    """Issues and checks the console's tokens with one signing key."""

    def __init__(self, secret: str, *, access_ttl: int, refresh_ttl: int) -> None:
        self._key = derive_key(secret, "console-tokens")
        self.access_ttl = access_ttl
        self.refresh_ttl = refresh_ttl

    def issue(self, holder: Holder, kind: TokenType = "access") -> str:
        now = int(time.time())
        ttl = self.access_ttl if kind == "access" else self.refresh_ttl
        claims = {
            "iss": ISSUER,
            "aud": AUDIENCE,
            "sub": holder.name,
            "name": holder.name,
            "holder": holder.kind,
            "typ": kind,
            "iat": now,
            "nbf": now,
            "exp": now + ttl,
        }
        return jwt.encode(claims, self._key, algorithm=ALGORITHM)

    def issue_pair(self, holder: Holder) -> Tokens:
        return Tokens(self.issue(holder, "access"), self.issue(holder, "refresh"))

    def verify(self, token: str, kind: TokenType = "access") -> Holder | None:
        """The holder of a valid token of ``kind``; None when it is forged, expired or other."""
        try:
            claims = jwt.decode(
                token,
                self._key,
                algorithms=[ALGORITHM],
                audience=AUDIENCE,
                issuer=ISSUER,
                options={"require": ["exp", "sub", "typ"]},
            )
        except jwt.PyJWTError:
            return None
        holder = claims.get("holder")
        if claims.get("typ") != kind or holder not in ("key", "user"):
            return None
        return Holder(holder, str(claims["sub"]))

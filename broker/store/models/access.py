"""Who may call and how much: API clients and request-type rules (database rows override the JSON
files), rate-limit buckets, and the console's credentials.
"""

from __future__ import annotations

import datetime as dt

from sqlalchemy import BigInteger, Boolean, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from broker.store.models.base import Base, JsonColumn, utcnow


class Client(Base):
    """An API client allowed in by its certificate."""

    __tablename__ = "clients"

    client_key: Mapped[str] = mapped_column(String(200), primary_key=True)  # lower-cased
    client_id: Mapped[str] = mapped_column(String(200))
    thumbprint: Mapped[str | None] = mapped_column(String(40), unique=True)  # SHA-1, upper hex
    fingerprint_sha256: Mapped[str | None] = mapped_column(String(64), unique=True)
    description: Mapped[str | None] = mapped_column(Text)
    scopes: Mapped[list[str] | None] = mapped_column(JsonColumn)
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)


class RequestTypeRule(Base):
    """Which client may submit which request type, with its required keys."""

    __tablename__ = "request_type_rules"

    client_key: Mapped[str] = mapped_column(String(200), primary_key=True)
    request_type_key: Mapped[str] = mapped_column(String(200), primary_key=True)
    client_id: Mapped[str] = mapped_column(String(200))
    request_type: Mapped[str] = mapped_column(String(200))
    required_keys: Mapped[list[str] | None] = mapped_column(JsonColumn)
    allow_additional_keys: Mapped[bool] = mapped_column(Boolean, default=False)
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)


class RateBucket(Base):
    """A client's rate-limit bucket kept in the database (``DatabaseBuckets`` of
    ``broker.adapters.buckets``): when its next token is due (GCRA's theoretical arrival time), in
    microseconds since 1970."""

    __tablename__ = "rate_buckets"

    key: Mapped[str] = mapped_column(String(250), primary_key=True)  # "<kind>:<client key>"
    arrival_us: Mapped[int] = mapped_column(BigInteger)


class ConsoleCredential(Base):
    """An API key or a console user of the console listener, with its role.

    Only hashes are stored: a key's SHA-256 (keys are long random strings, so a fast hash is
    safe and lets a request find its key by index), a user's salted scrypt password hash.
    """

    __tablename__ = "console_credentials"

    kind: Mapped[str] = mapped_column(String(10), primary_key=True)  # "key" or "user"
    name: Mapped[str] = mapped_column(String(200), primary_key=True)
    role: Mapped[str] = mapped_column(String(20))  # viewer, designer, operator
    secret_hash: Mapped[str] = mapped_column(String(255), unique=True)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)

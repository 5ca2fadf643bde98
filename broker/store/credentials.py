"""Console credentials, stored as hashes only: API keys as SHA-256, passwords as salted scrypt.
Functions here take a session and never commit."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac
import re
import secrets

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from broker.errors import BadRequest, Conflict, NotFound
from broker.store.models import ConsoleCredential

KEY = "key"
USER = "user"
ROLES = ("viewer", "designer", "operator")
KEY_PREFIX = "bk_"
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,199}$")
MIN_PASSWORD = 12
# scrypt cost: n=2**15, r=8 takes ~32 MiB and a few tens of milliseconds per check.
SCRYPT_N, SCRYPT_R, SCRYPT_P = 2**15, 8, 1
SCRYPT_MAXMEM = 64 * 1024 * 1024


@dataclasses.dataclass(frozen=True)
class Credential:
    """A credential's public face: never its secret or its hash."""

    kind: str
    name: str
    role: str
    created_at: str


def _view(row: ConsoleCredential) -> Credential:
    return Credential(row.kind, row.name, row.role, row.created_at.isoformat())


def check_name(name: str) -> str:
    if not NAME_PATTERN.match(name):
        raise BadRequest(
            "name must be 1-200 letters, digits, '_', '.', '@' or '-', starting with a letter "
            "or digit",
            field="name",
        )
    return name


def check_role(role: str) -> str:
    if role not in ROLES:
        raise BadRequest(f"role must be one of {', '.join(ROLES)}", field="role")
    return role


# API keys -----------------------------------------------------------------------------------------


def key_hash(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def create_key(session: Session, name: str, role: str) -> str:
    """Store a new API key named ``name``; return the key itself (the only time it is known)."""
    check_name(name)
    check_role(role)
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    _insert(session, ConsoleCredential(kind=KEY, name=name, role=role, secret_hash=key_hash(key)))
    return key


def find_key(session: Session, key: str) -> Credential | None:
    """The credential of an API key, or None for an unknown or revoked key."""
    if not key.startswith(KEY_PREFIX):
        return None
    row = session.scalar(
        select(ConsoleCredential).where(
            ConsoleCredential.kind == KEY, ConsoleCredential.secret_hash == key_hash(key)
        )
    )
    return None if row is None else _view(row)


# Console users ------------------------------------------------------------------------------------


def hash_password(password: str) -> str:
    salt = secrets.token_bytes(16)
    digest = hashlib.scrypt(
        password.encode(), salt=salt, n=SCRYPT_N, r=SCRYPT_R, p=SCRYPT_P, maxmem=SCRYPT_MAXMEM
    )
    parts = (str(SCRYPT_N), str(SCRYPT_R), str(SCRYPT_P), _b64(salt), _b64(digest))
    return "scrypt$" + "$".join(parts)


def password_matches(password: str, stored: str) -> bool:
    try:
        scheme, n, r, p, salt, digest = stored.split("$")
        if scheme != "scrypt":
            return False
        expected = base64.b64decode(digest)
        actual = hashlib.scrypt(
            password.encode(),
            salt=base64.b64decode(salt),
            n=int(n),
            r=int(r),
            p=int(p),
            maxmem=SCRYPT_MAXMEM,
            dklen=len(expected),
        )
    except ValueError:
        return False
    return hmac.compare_digest(actual, expected)


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


# A fixed hash checked when the user does not exist, so an unknown name costs as much time as a
# wrong password and the answer time does not tell which names exist.
_DUMMY_HASH: str | None = None


def add_user(session: Session, name: str, role: str, password: str) -> None:
    check_name(name)
    check_role(role)
    if len(password) < MIN_PASSWORD:
        raise BadRequest(f"password must be at least {MIN_PASSWORD} characters", field="password")
    row = ConsoleCredential(kind=USER, name=name, role=role, secret_hash=hash_password(password))
    _insert(session, row)


def verify_user(session: Session, name: str, password: str) -> Credential | None:
    """The user when the password is right, else None (same work either way)."""
    global _DUMMY_HASH
    row = session.get(ConsoleCredential, (USER, name))
    if row is None:
        if _DUMMY_HASH is None:
            _DUMMY_HASH = hash_password(secrets.token_urlsafe(16))
        password_matches(password, _DUMMY_HASH)
        return None
    return _view(row) if password_matches(password, row.secret_hash) else None


# Both ---------------------------------------------------------------------------------------------


def find(session: Session, kind: str, name: str) -> Credential | None:
    """A key or user by name (tokens name their holder; a revoked holder's tokens stop working)."""
    row = session.get(ConsoleCredential, (kind, name))
    return None if row is None else _view(row)


def list_all(session: Session, kind: str) -> list[Credential]:
    rows = session.scalars(
        select(ConsoleCredential)
        .where(ConsoleCredential.kind == kind)
        .order_by(ConsoleCredential.name)
    )
    return [_view(r) for r in rows]


def remove(session: Session, kind: str, name: str) -> None:
    """Revoke a key or remove a user by name; ``NotFound`` when there is none."""
    gone = session.execute(
        delete(ConsoleCredential)
        .where(ConsoleCredential.kind == kind, ConsoleCredential.name == name)
        .returning(ConsoleCredential.name)
    ).first()
    if gone is None:
        raise NotFound(f"No console {kind} named '{name}'")


def _insert(session: Session, row: ConsoleCredential) -> None:
    if session.get(ConsoleCredential, (row.kind, row.name)) is not None:
        raise Conflict(f"A console {row.kind} named '{row.name}' already exists")
    session.add(row)

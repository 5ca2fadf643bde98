"""Elsa's identity endpoints: ``POST /elsa/api/identity/login`` and ``.../refresh-token``."""

from __future__ import annotations

import logging
from typing import Any

from flask import Blueprint, Response, jsonify, request

from broker.console.auth import context, principal_for_holder
from broker.console.forms import settings
from broker.console.sign_in_limits import throttle
from broker.console.tokens import Holder
from broker.errors import BadRequest, Unauthenticated
from broker.store import credentials
from broker.store import db as store
from broker.web.inputs import read_json

logger = logging.getLogger(__name__)

bp = Blueprint("identity", __name__, url_prefix="/elsa/api/identity")
MAX_FIELD = 1024


def _field(body: dict[str, Any], name: str) -> str:
    # Elsa binds camelCase and PascalCase alike.
    value = body.get(name, body.get(name[:1].upper() + name[1:]))
    if not isinstance(value, str) or not value.strip():
        raise BadRequest(f"{name} is required", field=name)
    if len(value) > MAX_FIELD:
        raise BadRequest(f"{name} is too long", field=name)
    return value.strip()


def _answer(holder: Holder | None) -> Response:
    if holder is None:
        return jsonify({"isAuthenticated": False, "accessToken": None, "refreshToken": None})
    tokens = context().tokens.issue_pair(holder)
    return jsonify(
        {
            "isAuthenticated": True,
            "accessToken": tokens.access_token,
            "refreshToken": tokens.refresh_token,
        }
    )


@bp.post("/login")
def login() -> Response:
    body = read_json(settings())
    if not isinstance(body, dict):
        raise BadRequest("The body must be a JSON object with username and password")
    username, password = _field(body, "username"), _field(body, "password")
    throttle(username)  # before the password is hashed: a refused attempt costs nothing
    with store.transaction(context().session_factory, write=False) as db:
        user = credentials.verify_user(db, username, password)
    if user is None:
        logger.info("console: failed login for %r", username)
        return _answer(None)
    logger.info("console: user %s logged in", user.name)
    return _answer(Holder("user", user.name))


@bp.post("/refresh-token")
def refresh_token() -> Response:
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    holder = (
        context().tokens.verify(token.strip(), "refresh") if scheme.lower() == "bearer" else None
    )
    if holder is None or principal_for_holder(holder) is None:
        raise Unauthenticated("A valid refresh token is required")
    return _answer(holder)

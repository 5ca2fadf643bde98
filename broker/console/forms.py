"""What the console's server-rendered pages share: CSRF protection of their forms and the
console's settings."""

from __future__ import annotations

from flask import g, request
from flask_wtf.csrf import CSRFProtect

from broker.settings import Settings
from broker.web.context import services

csrf = CSRFProtect()


def settings() -> Settings:
    """The settings the console app was built with."""
    return services().settings


def protect_form() -> None:
    """Forms posted under a sign-in session must carry the session's CSRF token."""
    if request.method == "POST" and g.get("console_auth_via") != "header":
        csrf.protect()

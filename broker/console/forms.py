"""What the console's server-rendered pages share: CSRF protection of their forms and the
console's settings."""

from __future__ import annotations

from flask import current_app, g, request
from flask_wtf.csrf import CSRFProtect

from broker.console import studio
from broker.settings import Settings

csrf = CSRFProtect()


def settings() -> Settings:
    """The settings the console app was built with."""
    found: Settings = current_app.extensions[studio.SETTINGS]
    return found


def protect_form() -> None:
    """Forms posted under a sign-in session must carry the session's CSRF token."""
    if request.method == "POST" and g.get("console_auth_via") != "header":
        csrf.protect()

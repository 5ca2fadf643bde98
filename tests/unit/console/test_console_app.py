"""The console app: CORS for a Studio hosted elsewhere, security headers, the optional API."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy.orm import Session, sessionmaker

from broker.console import app as console_app_module
from broker.registry import WorkflowRegistry
from broker.settings import Settings
from broker.wiring.web import create_console_app as create_app

ORIGIN = "https://studio.example.com"


def preflight(settings: Settings, factory: sessionmaker[Session], registry: WorkflowRegistry):  # type: ignore[no-untyped-def]
    client = create_app(settings, session_factory=factory, registry=registry).test_client()
    return client.options(
        "/elsa/api/identity/login",
        headers={
            "Origin": ORIGIN,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization, content-type",
        },
    )


def test_cors_allows_the_configured_origin_on_the_api_only(
    console_settings: Settings,
    session_factory: sessionmaker[Session],
    registry: WorkflowRegistry,
) -> None:
    allowed = console_settings.replace(console_cors_origins=(ORIGIN,))
    response = preflight(allowed, session_factory, registry)
    assert response.headers["Access-Control-Allow-Origin"] == ORIGIN
    assert "authorization" in response.headers["Access-Control-Allow-Headers"].lower()
    page = create_app(allowed, session_factory=session_factory, registry=registry).test_client()
    assert (
        "Access-Control-Allow-Origin"
        not in page.get("/sign-in", headers={"Origin": ORIGIN}).headers
    )


def test_without_cors_origins_no_origin_is_allowed(
    console_settings: Settings,
    session_factory: sessionmaker[Session],
    registry: WorkflowRegistry,
) -> None:
    response = preflight(console_settings, session_factory, registry)
    assert "Access-Control-Allow-Origin" not in response.headers


def test_other_origins_are_not_allowed(
    console_settings: Settings,
    session_factory: sessionmaker[Session],
    registry: WorkflowRegistry,
) -> None:
    allowed = console_settings.replace(console_cors_origins=("https://other.example.com",))
    response = preflight(allowed, session_factory, registry)
    assert response.headers.get("Access-Control-Allow-Origin") != ORIGIN


def test_pages_are_never_cached_or_framed(client, keys) -> None:  # type: ignore[no-untyped-def]
    response = client.get("/requests", headers=keys.header("viewer"))
    assert response.headers["Cache-Control"] == "no-store"
    assert response.headers["X-Frame-Options"] == "DENY"
    assert response.headers["X-Content-Type-Options"] == "nosniff"


def test_the_console_runs_without_the_api_package(
    monkeypatch: pytest.MonkeyPatch,
    console_settings: Settings,
    session_factory: sessionmaker[Session],
    registry: WorkflowRegistry,
) -> None:
    def missing(name: str) -> None:
        raise ModuleNotFoundError(f"No module named {name!r}", name=name)

    monkeypatch.setattr(console_app_module.importlib, "import_module", missing)
    app = create_app(console_settings, session_factory=session_factory, registry=registry)
    assert not any(r.rule.startswith("/elsa/api/workflow") for r in app.url_map.iter_rules())
    assert app.test_client().get("/healthz").status_code == 200


def test_a_short_console_secret_is_refused(console_settings: Settings, tmp_path: Path) -> None:
    from broker.errors import ConfigError

    with pytest.raises(ConfigError, match="BROKER_CONSOLE_SECRET"):
        console_settings.replace(console_secret="short").resolved_console_secret()
    generated = console_settings.resolved_console_secret()
    assert generated == console_settings.resolved_console_secret()
    assert oct((console_settings.var_path / "console-secret").stat().st_mode & 0o777) == "0o600"

"""Fixtures of the Elsa API tests: a Flask app with only the API blueprint, a migrated database
(SQLite, or each of SQLite and PostgreSQL where a module asks for ``database_url``), a workflow
folder copied from ``workflows/``, and clients holding a console role.

The principal comes from a test-only header (``X-Test-Role``); the product's authentication is the
console app's, not the blueprint's."""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from flask import Flask, g, request
from flask.testing import FlaskClient
from sqlalchemy.orm import Session, sessionmaker

from broker.console.api import blueprint
from broker.console.roles import ROLES, Principal
from broker.ingress.context import EXTENSION, Services
from broker.registry import WorkflowRegistry
from broker.runtime.requests import NullPublisher
from broker.settings import Settings
from broker.store import db
from tests.conftest import PROJECT_ROOT

ROLE_HEADER = "X-Test-Role"


@pytest.fixture
def workflow_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "workflows"
    shutil.copytree(PROJECT_ROOT / "workflows", folder)
    return folder


@pytest.fixture
def console_database(settings: Settings) -> str:
    """The database of the API under test: SQLite here; a test module whose routes touch the
    store overrides it with ``database_url``, to run on SQLite and PostgreSQL."""
    return settings.database_url


@pytest.fixture
def console_settings(settings: Settings, workflow_dir: Path, console_database: str) -> Settings:
    return dataclasses.replace(
        settings, workflow_paths=(str(workflow_dir),), database_url=console_database
    )


@pytest.fixture
def session_factory(console_settings: Settings) -> Iterator[sessionmaker[Session]]:
    db.upgrade(console_settings.database_url)
    yield db.make_session_factory(db.make_engine(console_settings.database_url))
    db.dispose_engines()


@pytest.fixture
def registry(
    console_settings: Settings, session_factory: sessionmaker[Session]
) -> WorkflowRegistry:
    found = WorkflowRegistry(console_settings, session_factory)
    found.load()
    return found


@pytest.fixture
def api_app(
    console_settings: Settings,
    session_factory: sessionmaker[Session],
    registry: WorkflowRegistry,
) -> Flask:
    app = Flask("console-api-test")
    app.extensions[EXTENSION] = Services(
        settings=console_settings,
        session_factory=session_factory,
        publisher=NullPublisher(),
        registry=registry,
    )
    app.register_blueprint(blueprint)

    @app.before_request
    def _principal() -> None:
        role = request.headers.get(ROLE_HEADER)
        if role in ROLES:
            g.console_principal = Principal(name=f"test-{role}", role=role, kind="key")  # type: ignore[arg-type]

    return app


@pytest.fixture
def client_as(api_app: Flask) -> Callable[[str | None], FlaskClient]:
    """A test client holding a role (``None``: no credentials)."""

    def make(role: str | None) -> FlaskClient:
        client = api_app.test_client()
        if role is not None:
            client.environ_base["HTTP_X_TEST_ROLE"] = role
        return client

    return make

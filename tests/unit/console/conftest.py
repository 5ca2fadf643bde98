"""Fixtures of the in-process console tests: a migrated SQLite database, a workflow folder copied
from ``workflows/``, a small stand-in for Studio's package (so these tests need neither npm nor the
real files), and two apps:

- ``api_app``: the Elsa API blueprint alone, whose principal comes from a test-only header
  (``X-Test-Role``; ``client_as``), for the API's shapes and roles;
- ``console_app``: the whole console (authentication, pages, identity, and the API), with a key
  per role (``keys``), a console user and a request whose workflow ran part of the shipped
  invoice example (``invoice_request``).
"""

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
from broker.registry import WorkflowRegistry
from broker.runtime.ports import NullPublisher
from broker.settings import Settings
from broker.store import credentials, db
from broker.web.context import EXTENSION, Services
from broker.wiring.web import create_console_app as create_app
from tests.support.console import fake_assets, seed_invoice_request
from tests.support.doubles import RecordingPublisher
from tests.support.services import PROJECT_ROOT

ROLE_HEADER = "X-Test-Role"
PASSWORD = "correct horse battery staple"


@dataclasses.dataclass(frozen=True)
class Keys:
    viewer: str
    designer: str
    operator: str

    def header(self, role: str) -> dict[str, str]:
        return {"Authorization": f"ApiKey {getattr(self, role)}"}


@pytest.fixture
def workflow_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "workflows"
    shutil.copytree(PROJECT_ROOT / "workflows", folder)
    return folder


@pytest.fixture
def console_settings(settings: Settings, workflow_dir: Path, tmp_path: Path) -> Settings:
    found = settings.replace(
        workflow_paths=(str(workflow_dir),), console_assets_dir=str(tmp_path / "assets")
    )
    fake_assets(found)
    return found


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


# The API blueprint alone --------------------------------------------------------------------------


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


# The whole console --------------------------------------------------------------------------------


@pytest.fixture
def keys(session_factory: sessionmaker[Session]) -> Keys:
    with db.transaction(session_factory) as session:
        made = {role: credentials.create_key(session, role, role) for role in credentials.ROLES}
        credentials.add_user(session, "alice", "designer", PASSWORD)
    return Keys(**made)


@pytest.fixture
def publisher() -> RecordingPublisher:
    return RecordingPublisher()


@pytest.fixture
def console_app(
    console_settings: Settings,
    session_factory: sessionmaker[Session],
    registry: WorkflowRegistry,
    publisher: RecordingPublisher,
    keys: Keys,
) -> Flask:
    return create_app(
        console_settings, session_factory=session_factory, registry=registry, publisher=publisher
    )


@pytest.fixture
def client(console_app: Flask) -> FlaskClient:
    return console_app.test_client()


@pytest.fixture
def invoice_request(session_factory: sessionmaker[Session], registry: WorkflowRegistry) -> str:
    """A request of the shipped InvoiceProcess, faulted at the approval wait, with a dead letter."""
    published = registry.for_request_type("InvoiceProcess")
    assert published is not None
    return seed_invoice_request(session_factory, published)

"""Fixtures of the in-process console tests: a migrated SQLite database, a key per role, a user,
a small stand-in for Studio's package (so these tests need neither npm nor the real files), the
console app and a request whose workflow ran part of the shipped invoice example."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy.orm import Session, sessionmaker

from broker.console.app import create_app
from broker.registry import WorkflowRegistry
from broker.settings import Settings
from broker.store import credentials, db
from tests.support.console import fake_assets, seed_invoice_request

PASSWORD = "correct horse battery staple"


class RecordingPublisher:
    """Remembers what the console asked to publish after a commit."""

    def __init__(self) -> None:
        self.published: list[str] = []

    def publish(self, outbox_ids: list[str]) -> None:
        self.published.extend(outbox_ids)


@dataclasses.dataclass(frozen=True)
class Keys:
    viewer: str
    designer: str
    operator: str

    def header(self, role: str) -> dict[str, str]:
        return {"Authorization": f"ApiKey {getattr(self, role)}"}


@pytest.fixture
def console_settings(settings: Settings, tmp_path: Path) -> Settings:
    installed = settings.replace(console_assets_dir=str(tmp_path / "assets"))
    fake_assets(installed)
    return installed


@pytest.fixture
def session_factory(console_settings: Settings) -> Iterator[sessionmaker[Session]]:
    db.upgrade(console_settings.database_url)
    yield db.make_session_factory(db.make_engine(console_settings.database_url))
    db.dispose_engines()


@pytest.fixture
def keys(session_factory: sessionmaker[Session]) -> Keys:
    with db.transaction(session_factory) as session:
        made = {role: credentials.create_key(session, role, role) for role in credentials.ROLES}
        credentials.add_user(session, "alice", "designer", PASSWORD)
    return Keys(**made)


@pytest.fixture
def registry(
    console_settings: Settings, session_factory: sessionmaker[Session]
) -> WorkflowRegistry:
    found = WorkflowRegistry(console_settings, session_factory)
    found.load()
    return found


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

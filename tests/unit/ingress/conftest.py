"""Fixtures of the in-process ingress tests: a PKI, config files, a migrated SQLite database, the
public and internal apps, and test clients that present a certificate as the middleware would."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy.orm import Session, sessionmaker

from broker.ingress.auth import PEER_CERT
from broker.settings import Settings
from broker.store import db
from broker.wiring.web import create_internal_app, create_public_app
from tests.support.doubles import RecordingPublisher
from tests.support.ingress import Pki, make_pki, settings_for, write_config


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def ingress_settings(tmp_path: Path, pki: Pki) -> Settings:
    return settings_for(tmp_path / "var", pki, write_config(tmp_path / "config", pki))


@pytest.fixture
def session_factory(ingress_settings: Settings) -> Iterator[sessionmaker[Session]]:
    db.upgrade(ingress_settings.database_url)
    yield db.make_session_factory(db.make_engine(ingress_settings.database_url))
    db.dispose_engines()


@pytest.fixture
def publisher() -> RecordingPublisher:
    return RecordingPublisher()


@pytest.fixture
def app(
    ingress_settings: Settings,
    session_factory: sessionmaker[Session],
    publisher: RecordingPublisher,
) -> Flask:
    return create_public_app(ingress_settings, session_factory=session_factory, publisher=publisher)


@pytest.fixture
def internal_app(ingress_settings: Settings, session_factory: sessionmaker[Session]) -> Flask:
    return create_internal_app(ingress_settings, session_factory=session_factory)


@pytest.fixture
def client_as(app: Flask, pki: Pki) -> Callable[[str], FlaskClient]:
    """A test client presenting the named certificate (as the middleware puts it in environ)."""

    def make(name: str) -> FlaskClient:
        client = app.test_client()
        client.environ_base[PEER_CERT] = pki.der(name)  # type: ignore[assignment]
        return client

    return make

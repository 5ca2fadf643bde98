"""The command line's builder: each command asks it for the one part it needs (a session
factory, the client allowlist, a workflow registry) instead of building it from settings."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlalchemy.orm import Session, sessionmaker

from broker.settings import Settings, get_settings
from broker.store import db

if TYPE_CHECKING:
    from broker.clients.registry import ClientRegistry
    from broker.registry import WorkflowRegistry


def session_factory(
    database_url: str | None = None, *, upgrade: bool = False
) -> sessionmaker[Session]:
    """A session factory on ``database_url`` (``BROKER_DATABASE_URL`` when None), the schema
    brought up to date first when ``upgrade``."""
    url = database_url or get_settings().database_url
    if upgrade:
        db.upgrade(url)
    return db.make_session_factory(db.make_engine(url))


def client_registry(settings: Settings | None = None, *, upgrade: bool = False) -> ClientRegistry:
    """The merged client allowlist (files and database)."""
    from broker.clients.registry import ClientRegistry

    settings = settings or get_settings()
    return ClientRegistry(settings, session_factory(settings.database_url, upgrade=upgrade))


def workflow_registry(
    settings: Settings | None = None, *, database: bool = True
) -> WorkflowRegistry:
    """A loaded workflow registry that watches nothing; without ``database`` it only scans the
    folders and publishes nothing."""
    from broker.registry import WorkflowRegistry

    settings = (settings or get_settings()).replace(watch_workflows=False)
    factory = session_factory(settings.database_url) if database else None
    registry = WorkflowRegistry(settings, factory)
    registry.load()
    return registry

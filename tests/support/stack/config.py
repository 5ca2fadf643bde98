"""The settings a test stack's roles share: the backend (embedded or services), the listeners'
binds on free loopback ports, and the settings object the test itself reads them with."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path

from broker.settings import Settings
from tests.support.services import free_port


def embedded(var: Path) -> dict[str, str]:
    """One machine, nothing else running: SQLite, the filesystem transport and file locks."""
    return {
        "BROKER_VAR_DIR": str(var),
        "BROKER_DATABASE_URL": f"sqlite:///{var / 'broker.db'}",
        "BROKER_QUEUE_URL": "filesystem://",
        "BROKER_LOCK_URL": f"file://{var / 'locks'}",
        "BROKER_SMTP_URL": f"file://{var / 'mail'}",
        "BROKER_LOG_FORMAT": "text",
    }


def services(
    var: Path, database_url: str, queue_url: str, lock_url: str | None = None
) -> dict[str, str]:
    """Production's backends: PostgreSQL, a Redis (or RabbitMQ) transport and Redis locks
    (the queue's server unless ``lock_url`` names another)."""
    return {
        **embedded(var),
        "BROKER_DATABASE_URL": database_url,
        "BROKER_QUEUE_URL": queue_url,
        "BROKER_LOCK_URL": lock_url or queue_url,
    }


@dataclasses.dataclass(frozen=True)
class Ports:
    """Free loopback ports for the listeners of one stack."""

    public: int = dataclasses.field(default_factory=free_port)
    internal: int = dataclasses.field(default_factory=free_port)
    console: int = dataclasses.field(default_factory=free_port)

    def binds(self) -> dict[str, str]:
        return {
            "BROKER_PUBLIC_BIND": f"127.0.0.1:{self.public}",
            "BROKER_INTERNAL_BIND": f"127.0.0.1:{self.internal}",
            "BROKER_CONSOLE_BIND": f"127.0.0.1:{self.console}",
        }

    def of(self, role: str) -> int:
        port: int = getattr(self, role)
        return port


def settings_of(env: Mapping[str, str]) -> Settings:
    """The settings the roles read from ``env`` (its BROKER_* keys alone)."""
    return Settings.from_env({k: v for k, v in env.items() if k.startswith("BROKER_")})

"""What the blueprints need from the composition root, and the one transaction helper."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, Protocol

from flask import current_app
from sqlalchemy.orm import Session, sessionmaker

from broker.errors import ConfigError
from broker.runtime.ports import PinnedWorkflow, Publisher
from broker.settings import Settings

if TYPE_CHECKING:
    from broker.outbound.files import FolderFiles
    from broker.outbound.http_client import OutboundHttp

EXTENSION = "broker"


class ApiClientLike(Protocol):
    @property
    def client_id(self) -> str: ...
    @property
    def scopes(self) -> frozenset[str]: ...


class RuleLike(Protocol):
    @property
    def request_type(self) -> str: ...
    @property
    def required_keys(self) -> tuple[str, ...]: ...
    @property
    def allow_additional_keys(self) -> bool: ...


class ClientDirectory(Protocol):
    """What the ingress asks of ``broker.clients.registry.ClientRegistry``."""

    def authenticate(
        self, *, sha1_thumbprint: str, sha256_fingerprint: str
    ) -> ApiClientLike | None: ...
    def rule_for(self, client_id: str, request_type: str) -> RuleLike | None: ...
    def rules_for(self, client_id: str) -> Iterable[RuleLike]: ...


class WorkflowDirectory(Protocol):
    """What the ingress asks of ``broker.registry.WorkflowRegistry``."""

    def for_request_type(self, name: str) -> PinnedWorkflow | None: ...
    def get_definition(self, definition_id: str) -> Any: ...


class SharedParts(Protocol):
    """The process's parts a route reaches besides the database, each built on first use."""

    @property
    def http(self) -> OutboundHttp: ...
    @property
    def files(self) -> FolderFiles: ...


@dataclasses.dataclass(frozen=True)
class Services:
    settings: Settings
    session_factory: sessionmaker[Session]
    publisher: Publisher
    clients: ClientDirectory | None = None
    registry: WorkflowDirectory | None = None
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)
    #: the outbound guard and the file storage (the process's runtime)
    parts: SharedParts | None = None

    def shared(self) -> SharedParts:
        if self.parts is None:
            raise ConfigError("this listener has no outbound HTTP nor file storage")
        return self.parts

    def client_directory(self) -> ClientDirectory:
        if self.clients is None:
            raise ConfigError("this listener has no client allowlist")
        return self.clients

    def workflow_directory(self) -> WorkflowDirectory:
        if self.registry is None:
            raise ConfigError("this listener has no workflow registry")
        return self.registry


def services() -> Services:
    found: Services = current_app.extensions[EXTENSION]
    return found


@contextlib.contextmanager
def transaction(write: bool = True) -> Iterator[Session]:
    """One transaction on the app's database: commits on success, rolls back on error."""
    from broker.store import db

    with db.transaction(services().session_factory, write=write) as session:
        yield session

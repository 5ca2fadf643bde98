"""The narrow ports a use-case asks for instead of the whole process: each names only the shared
parts it reads. The wiring floor's ``Runtime`` satisfies all of them; a test may pass less."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from sqlalchemy.orm import Session, sessionmaker

from broker.settings import Settings

if TYPE_CHECKING:
    from broker.clients.registry import ClientRegistry
    from broker.engine.model.resilience import HttpStrategy
    from broker.engine.run.ports import Mailer
    from broker.outbound.files import FolderFiles
    from broker.outbound.http_client import OutboundHttp
    from broker.registry import WorkflowRegistry
    from broker.runtime.definitions import RegistryLookup
    from broker.runtime.outbox.publisher import OutboxPublisher
    from broker.runtime.ports import LockProvider


class Store(Protocol):
    """The settings and the session factory: every use-case's ground."""

    @property
    def settings(self) -> Settings: ...
    @property
    def factory(self) -> sessionmaker[Session]: ...


class Locking(Store, Protocol):
    """A use-case that serialises work on an instance or a job with named locks."""

    @property
    def locks(self) -> LockProvider: ...


class Publishing(Locking, Protocol):
    """A use-case that writes outbox rows and sends them at once (the relay covers failures)."""

    @property
    def publisher(self) -> OutboxPublisher: ...


class Workflows(Store, Protocol):
    """A use-case that reads published workflows and their parsed definitions."""

    @property
    def registry(self) -> WorkflowRegistry: ...
    @property
    def definitions(self) -> RegistryLookup: ...


class Alterations(Workflows, Locking, Protocol):
    """Operators' alterations and retries of instances."""


class Recovery(Publishing, Protocol):
    """The maintenance jobs: stalled-work recovery and the purge (which removes stored files)."""

    @property
    def files(self) -> FolderFiles: ...


class Bookmarks(Publishing, Workflows, Protocol):
    """The bookmark queue and its timers: resumes, trigger starts, client checks."""

    @property
    def clients(self) -> ClientRegistry: ...


class Steps(Bookmarks, Recovery, Protocol):
    """A workflow step: everything an activity may reach (HTTP, mail, files, strategies)."""

    @property
    def http(self) -> OutboundHttp: ...
    @property
    def mailer(self) -> Mailer: ...
    @property
    def strategies(self) -> dict[str, HttpStrategy]: ...

"""The composition root: ``Runtime`` builds a process's shared parts once (session factory,
registries, locks, publishers) for its tasks and for the ingress and console app factories.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from sqlalchemy.orm import Session, sessionmaker

from broker.adapters.transport.celery_config import create_celery
from broker.runtime.outbox.publisher import CelerySender, OutboxPublisher
from broker.runtime.ports import Sender
from broker.settings import Settings, get_settings
from broker.store.db import make_engine, make_session_factory

if TYPE_CHECKING:  # built lazily below: a process pays only for the parts it uses
    from celery import Celery

    from broker.clients.registry import ClientRegistry
    from broker.engine.model.resilience import HttpStrategy
    from broker.engine.run.ports import Mailer
    from broker.outbound.files import FolderFiles
    from broker.outbound.http_client import OutboundHttp
    from broker.registry import WorkflowRegistry
    from broker.runtime.definitions import RegistryLookup
    from broker.runtime.ports import LockProvider

logger = logging.getLogger(__name__)


class Runtime:
    """Settings plus the shared parts built from them, each created on first use."""

    def __init__(
        self,
        settings: Settings,
        *,
        factory: sessionmaker[Session] | None = None,
        registry: WorkflowRegistry | None = None,
        locks: LockProvider | None = None,
        sender: Sender | None = None,
        celery_app: Celery | None = None,
        http: OutboundHttp | None = None,
        mailer: Mailer | None = None,
    ) -> None:
        self.settings = settings
        self._factory = factory
        self._registry = registry
        self._clients: ClientRegistry | None = None
        self._locks = locks
        self._sender = sender
        self._celery_app = celery_app
        self._http = http
        self._mailer = mailer
        self._lock = threading.RLock()

    @property
    def factory(self) -> sessionmaker[Session]:
        with self._lock:
            if self._factory is None:
                self._factory = make_session_factory(make_engine(self.settings.database_url))
            return self._factory

    @property
    def registry(self) -> WorkflowRegistry:
        with self._lock:
            if self._registry is None:
                from broker.registry import WorkflowRegistry

                registry = WorkflowRegistry(self.settings, self.factory)
                registry.load()
                for problem in registry.problems:
                    logger.warning("workflow problem: %s: %s", problem.file, problem.reason)
                if self.settings.watch_workflows:
                    registry.watch()
                self._registry = registry
            return self._registry

    @property
    def locks(self) -> LockProvider:
        with self._lock:
            if self._locks is None:
                from broker.adapters.locks import make_lock_provider

                self._locks = make_lock_provider(self.settings)
            return self._locks

    @property
    def celery_app(self) -> Celery:
        with self._lock:
            if self._celery_app is None:
                self._celery_app = create_celery(self.settings, set_as_current=False)
            return self._celery_app

    @property
    def sender(self) -> Sender:
        with self._lock:
            if self._sender is None:
                self._sender = CelerySender(self.celery_app)
            return self._sender

    @property
    def publisher(self) -> OutboxPublisher:
        return OutboxPublisher(self.settings, self.factory, self.sender)

    @property
    def http(self) -> OutboundHttp:
        with self._lock:
            if self._http is None:
                from broker.outbound.http_client import OutboundHttp

                self._http = OutboundHttp(self.settings)
            return self._http

    @property
    def clients(self) -> ClientRegistry:
        """The merged client allowlist (files and database: ``ClientRegistry``), loaded on first
        use: triggers check permissions and webhooks find endpoints with it."""
        with self._lock:
            if self._clients is None:
                from broker.clients.registry import ClientRegistry

                registry = ClientRegistry(self.settings, self.factory)
                registry.load()
                self._clients = registry
            return self._clients

    @property
    def mailer(self) -> Mailer:
        with self._lock:
            if self._mailer is None:
                from broker.outbound.mail import make_mailer

                self._mailer = make_mailer(self.settings)
            return self._mailer

    @functools.cached_property
    def files(self) -> FolderFiles:
        """The file storage (``BROKER_FILE_STORAGE_URL``)."""
        from broker.outbound.files import make_file_store

        return make_file_store(self.settings)

    @functools.cached_property
    def strategies(self) -> dict[str, HttpStrategy]:
        """The resilience strategies HTTP activities may name (``BROKER_RESILIENCE_STRATEGIES``);
        a malformed one is a ``ConfigError`` naming the setting."""
        from broker.engine.model.resilience import StrategyError, parse_strategies
        from broker.errors import ConfigError

        try:
            return parse_strategies(self.settings.resilience_strategies)
        except StrategyError as exc:
            raise ConfigError(f"BROKER_RESILIENCE_STRATEGIES: {exc}") from exc

    @functools.cached_property
    def web_publisher(self) -> OutboxPublisher:
        """The fast-path publisher of a web process (``make_publisher``), built once."""
        return make_publisher(self.settings, self.factory)

    @functools.cached_property
    def definitions(self) -> RegistryLookup:
        from broker.runtime.definitions import RegistryLookup

        return RegistryLookup(self.registry)


_current: Runtime | None = None
_current_pid: int | None = None
_current_lock = threading.Lock()


def get_runtime() -> Runtime:
    """This process's runtime, built from ``get_settings()`` on first use (again after a fork)."""
    global _current, _current_pid
    with _current_lock:
        if _current is None:
            _current = Runtime(get_settings())
        elif _current_pid != os.getpid():
            # Forked: keep the settings and the Celery app (Celery resets its own pools in a
            # child), rebuild everything holding sockets, threads or watchers.
            _current = Runtime(_current.settings, celery_app=_current._celery_app)
        _current_pid = os.getpid()
        return _current


def set_runtime(runtime: Runtime | None) -> None:
    """Install a runtime for this process (worker start-up with its Celery app, tests)."""
    global _current, _current_pid
    with _current_lock:
        _current = runtime
        _current_pid = os.getpid() if runtime is not None else None


def connect(settings: Settings) -> Callable[[], sessionmaker[Session]]:
    """A session factory made when first called: the readiness probe of a process that has no
    runtime of its own (a gunicorn master, a worker's metrics thread)."""
    return lambda: make_session_factory(make_engine(settings.database_url))


def make_publisher(settings: Settings, factory: sessionmaker[Session]) -> OutboxPublisher:
    """The fast-path publisher for the ingress: its own Celery app, configured like the workers'.

    Without the task-sent event: the ingress sends one task per submission and the event is a
    second message on the hot path; monitors still see every task through the workers' events.
    """
    app = create_celery(settings, set_as_current=False)
    app.conf.task_send_sent_event = False
    return OutboxPublisher(settings, factory, CelerySender(app))

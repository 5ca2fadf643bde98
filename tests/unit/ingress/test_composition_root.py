"""One composition root: a process's ``Runtime`` builds the shared parts once and every Flask
factory (public, internal, console) and WSGI entry point takes them from it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from flask import Flask
from sqlalchemy.orm import Session, sessionmaker

from broker.registry import WorkflowRegistry
from broker.runtime.ports import NullPublisher
from broker.serving import wsgi
from broker.settings import Settings
from broker.web.context import EXTENSION, Services
from broker.wiring.runtime import Runtime, set_runtime
from broker.wiring.web import create_console_app as create_app
from broker.wiring.web import create_internal_app, create_public_app


def _services(app: Flask) -> Services:
    found = app.extensions[EXTENSION]
    assert isinstance(found, Services)
    return found


@pytest.fixture
def runtime(
    ingress_settings: Settings, session_factory: sessionmaker[Session]
) -> Iterator[Runtime]:
    found = Runtime(ingress_settings.replace(watch_workflows=False), factory=session_factory)
    yield found
    set_runtime(None)


def test_one_runtime_feeds_the_public_internal_and_console_apps(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given one runtime, counting the workflow registries loaded
    loaded: list[WorkflowRegistry] = []
    load = WorkflowRegistry.load

    def counting_load(self: WorkflowRegistry) -> None:
        loaded.append(self)
        load(self)

    monkeypatch.setattr(WorkflowRegistry, "load", counting_load)
    settings = runtime.settings
    # When every listener's app is built from it
    public = _services(create_public_app(settings, runtime=runtime))
    internal = _services(create_internal_app(settings, runtime=runtime))
    console = _services(create_app(settings, runtime=runtime))
    # Then they share its session factory, registry and client list, loaded once
    assert public.session_factory is internal.session_factory is console.session_factory
    assert public.session_factory is runtime.factory
    assert public.registry is console.registry is runtime.registry
    assert public.clients is runtime.clients
    assert loaded == [runtime.registry]
    # And the public app publishes on the runtime's fast path; the internal one publishes nothing
    assert public.publisher is runtime.web_publisher
    assert isinstance(internal.publisher, NullPublisher)


def test_keyword_parts_override_the_runtimes(
    runtime: Runtime, session_factory: sessionmaker[Session]
) -> None:
    publisher = NullPublisher()
    services = _services(
        create_public_app(runtime.settings, runtime=runtime, publisher=publisher, clients=None)
    )
    assert services.publisher is publisher
    assert services.session_factory is session_factory


def test_the_wsgi_entry_points_use_the_process_runtime(runtime: Runtime) -> None:
    set_runtime(runtime)
    public = _services(wsgi._public())
    internal = _services(wsgi._internal())
    assert public.registry is runtime.registry
    assert public.session_factory is internal.session_factory is runtime.factory

"""The broker's two listeners under real gunicorn, started once per session on free ports.

The public listener speaks mutual TLS with certificates generated for the session; the internal
listener speaks plain HTTP. Both run from this checkout's config files
(``config/gunicorn*.conf.py``) exactly as the README starts them, against a migrated SQLite
database, as a ``tests.support.stack`` stack (stopped by pid, logs kept under its root).
"""

from __future__ import annotations

import dataclasses
import http.client
import json
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker.settings import Settings
from broker.store import db
from tests.support.ingress import (
    Pki,
    environment,
    make_pki,
    mark_dispatched,
    signed_callback,
    write_config,
)
from tests.support.stack import roles
from tests.support.stack.config import Ports
from tests.support.stack.roster import OnStack, Stack

START_TIMEOUT = 60.0
CALLBACK_SECRET = "e2e-callback-secret"


@dataclasses.dataclass(frozen=True)
class Response:
    status: int
    headers: dict[str, str]
    body: Any


@dataclasses.dataclass
class Server(OnStack):
    """The listeners of a ``tests.support.stack`` stack and a client of each."""

    pki: Pki
    roles: Stack

    @property
    def root(self) -> Path:
        return self.roles.root

    @property
    def env(self) -> dict[str, str]:
        return self.roles.env

    @property
    def settings(self) -> Settings:
        return Settings.from_env({k: v for k, v in self.env.items() if k.startswith("BROKER_")})

    def context(self, name: str | None, *, tls12: bool = False) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.pki.ca))
        if tls12:
            context.minimum_version = context.maximum_version = ssl.TLSVersion.TLSv1_2
        if name is not None:
            context.load_cert_chain(self.pki.pem(name), self.pki.key(name))
        return context

    def call(
        self,
        name: str | None,
        method: str,
        path: str,
        body: Any = None,
        *,
        raw: bytes | None = None,
        headers: dict[str, str] | None = None,
        tls12: bool = False,
    ) -> Response:
        """One request to the public listener presenting ``name``'s certificate."""
        conn = http.client.HTTPSConnection(
            "localhost", self.public_port, timeout=30, context=self.context(name, tls12=tls12)
        )
        try:
            payload = (
                raw if raw is not None else (None if body is None else json.dumps(body).encode())
            )
            sent = {"Content-Type": "application/json", **(headers or {})}
            conn.request(method, path, body=payload, headers=sent)
            return _read(conn.getresponse())
        finally:
            conn.close()

    def internal(
        self,
        method: str,
        path: str,
        body: Any = None,
        headers: dict[str, str] | None = None,
        *,
        raw: bytes | None = None,
    ) -> Response:
        conn = http.client.HTTPConnection("127.0.0.1", self.internal_port, timeout=30)
        try:
            payload = (
                raw if raw is not None else (None if body is None else json.dumps(body).encode())
            )
            conn.request(
                method,
                path,
                body=payload,
                headers={"Content-Type": "application/json", **(headers or {})},
            )
            return _read(conn.getresponse())
        finally:
            conn.close()

    def dispatch(self, request_id: str) -> int:
        """Mark ``request_id`` dispatched to a remote executor, as the worker does before it POSTs
        (these listeners run without a worker); answers the dispatch attempt."""
        return mark_dispatched(self.settings.database_url, request_id)

    def callback(
        self, request_id: str, document: Any, *, attempt: int, msg_id: str | None = None
    ) -> Response:
        """The remote executor's signed result for dispatch ``attempt`` of ``request_id``."""
        raw, headers = signed_callback(
            CALLBACK_SECRET, request_id, attempt, document, msg_id=msg_id
        )
        path = f"/internal/requests/{request_id}/result"
        return self.internal("POST", path, headers=headers, raw=raw)


def _read(response: http.client.HTTPResponse) -> Response:
    raw = response.read()
    content_type = response.getheader("Content-Type", "")
    body: Any = json.loads(raw) if raw and "json" in content_type else raw.decode()
    return Response(response.status, {k: v for k, v in response.getheaders()}, body)


@pytest.fixture(scope="session")
def broker_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("e2e")
    pki = make_pki(root / "certs")
    config = write_config(root / "config", pki)
    ports = Ports()
    broker_env = environment(
        root / "var",
        pki,
        config,
        BROKER_PUBLIC_BIND=f"127.0.0.1:{ports.public}",
        BROKER_INTERNAL_BIND=f"127.0.0.1:{ports.internal}",
        BROKER_CALLBACK_SECRET=CALLBACK_SECRET,
    )
    (root / "var").mkdir()
    db.upgrade(broker_env["BROKER_DATABASE_URL"])
    db.dispose_engines()
    # Both listeners share prometheus-client's multiprocess folder, so the internal /metrics
    # reports what the public workers counted.
    metrics_dir = root / "prometheus"
    metrics_dir.mkdir()
    stack = Stack(root, {**broker_env, "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir)}, ports=ports)
    for name in ("public", "internal"):
        stack.start(name, roles.listener(name, workers=1, threads=4))
    try:
        stack.wait_listening()
        yield Server(pki, stack)
    finally:
        stack.close()


# Summary lines ------------------------------------------------------------------------------------
# A module may report one line for the end of the run (the console fuzz: calls, bodies, 5xx). Under
# pytest-xdist a worker hands its lines to the controller, which prints them in its summary.

_SUMMARY_KEY = "broker_summary_lines"
_summary: list[str] = []
_config: pytest.Config | None = None


def record_summary(line: str) -> None:
    """Print ``line`` in the terminal summary of this run (whichever process ran the test)."""
    _summary.append(line)
    workeroutput = getattr(_config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput[_SUMMARY_KEY] = list(_summary)


def pytest_configure(config: pytest.Config) -> None:
    global _config
    _config = config


def pytest_testnodedown(node: Any, error: Any) -> None:
    _summary.extend(getattr(node, "workeroutput", {}).get(_SUMMARY_KEY, []))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _summary and not hasattr(terminalreporter.config, "workeroutput"):
        terminalreporter.section("summaries")
        for line in _summary:
            terminalreporter.write_line(line)

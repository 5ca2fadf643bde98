"""The broker's two listeners under real gunicorn, started once per session on free ports.

The public listener speaks mutual TLS with certificates generated for the session; the internal
listener speaks plain HTTP. Both run from this checkout's config files
(``config/gunicorn*.conf.py``) exactly as the README starts them, against a migrated SQLite
database. They are stopped by PID.
"""

from __future__ import annotations

import dataclasses
import http.client
import json
import os
import socket
import ssl
import subprocess
import sys
import time
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
from tests.support.services import PROJECT_ROOT, free_port

START_TIMEOUT = 60.0
CALLBACK_SECRET = "e2e-callback-secret"


@dataclasses.dataclass(frozen=True)
class Response:
    status: int
    headers: dict[str, str]
    body: Any


@dataclasses.dataclass
class Server:
    pki: Pki
    root: Path
    env: dict[str, str]
    public_port: int
    internal_port: int
    processes: list[subprocess.Popen[bytes]]

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


def _wait_listening(port: int, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"gunicorn exited with {process.returncode}:\n{log.read_text()}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"gunicorn did not listen on {port} in time:\n{log.read_text()}")


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)


@pytest.fixture(scope="session")
def broker_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("e2e")
    pki = make_pki(root / "certs")
    config = write_config(root / "config", pki)
    public_port, internal_port = free_port(), free_port()
    broker_env = environment(
        root / "var",
        pki,
        config,
        BROKER_PUBLIC_BIND=f"127.0.0.1:{public_port}",
        BROKER_INTERNAL_BIND=f"127.0.0.1:{internal_port}",
        BROKER_CALLBACK_SECRET=CALLBACK_SECRET,
    )
    (root / "var").mkdir()
    db.upgrade(broker_env["BROKER_DATABASE_URL"])
    db.dispose_engines()
    inherited = {
        k: v
        for k, v in os.environ.items()  # noqa: TID251 - the child's PATH, HOME
        if not k.startswith(("BROKER_", "GUNICORN_", "PROMETHEUS_"))
    }
    # Both listeners share prometheus-client's multiprocess folder, so the internal /metrics
    # reports what the public workers counted.
    metrics_dir = root / "prometheus"
    metrics_dir.mkdir()
    env = {**inherited, **broker_env, "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir)}
    server = Server(pki, root, env, public_port, internal_port, [])
    try:
        for name, conf, app, port in (
            ("public", "gunicorn.conf.py", "broker.serving.wsgi:public", public_port),
            (
                "internal",
                "gunicorn_internal.conf.py",
                "broker.serving.wsgi:internal",
                internal_port,
            ),
        ):
            log = root / f"{name}.log"
            with log.open("wb") as sink:
                process = subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "gunicorn",
                        "-c",
                        str(PROJECT_ROOT / "config" / conf),
                        "--workers",
                        "1",
                        "--threads",
                        "4",
                        app,
                    ],
                    cwd=PROJECT_ROOT,
                    env=env,
                    stdout=sink,
                    stderr=subprocess.STDOUT,
                )
            server.processes.append(process)
            _wait_listening(port, process, log)
        yield server
    finally:
        for process in server.processes:
            _stop(process)


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

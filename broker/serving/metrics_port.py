"""The plain-HTTP port of a role whose listener cannot be scraped or probed (the ingress's mTLS
listener) or that has none (a worker): ``/metrics``, ``/healthz`` and ``/readyz``."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import REGISTRY, CollectorRegistry, make_wsgi_app

from broker.adapters import health
from broker.telemetry.metrics import multiprocess_enabled, parse_bind


def serve(bind: str, setting: str, ready: Callable[[], health.Readiness] | None = None) -> Any:
    """Serve ``/metrics`` on ``bind`` from a thread of this process (a Celery worker's or a
    gunicorn master's): the counters of every process sharing its multiprocess folder (its pool
    children or gunicorn workers), or this process's own without one. ``/healthz`` answers that
    the process serves; ``/readyz`` runs ``ready`` (the probes of a role with no plain-HTTP
    listener of its own). Answers the server."""

    class Server(ThreadingMixIn, WSGIServer):
        daemon_threads = True

    class QuietHandler(WSGIRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            """Probes and scrapes every few seconds are not worth a log line."""

    host, port = parse_bind(bind, setting)
    registry: CollectorRegistry = REGISTRY
    if multiprocess_enabled():
        from prometheus_client import multiprocess

        registry = CollectorRegistry(auto_describe=False)
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    app = probes_app(make_wsgi_app(registry), ready)
    if ":" in host:
        Server.address_family = socket.AF_INET6
    server = make_server(host, port, app, Server, handler_class=QuietHandler)
    thread = threading.Thread(target=server.serve_forever, name="broker-metrics", daemon=True)
    thread.start()
    return server


def probes_app(metrics_app: Any, ready: Callable[[], health.Readiness] | None) -> Any:
    """A WSGI app: ``/healthz`` and ``/readyz`` (when ``ready`` is given), else ``metrics_app``."""

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path == "/healthz":
            status, body = 200, health.liveness()
        elif path == "/readyz" and ready is not None:
            answer = ready()
            status, body = answer.status, answer.body()
        else:
            return metrics_app(environ, start_response)  # type: ignore[no-any-return]
        payload = json.dumps(body).encode()
        reason = "OK" if status == 200 else "Service Unavailable"
        start_response(
            f"{status} {reason}",
            [("Content-Type", "application/json"), ("Content-Length", str(len(payload)))],
        )
        return [payload]

    return app

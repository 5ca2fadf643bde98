"""What the three listeners share: the broker's log format for gunicorn's own lines, the TLS
floor, and the metrics clean-up of a dead worker."""

from __future__ import annotations

import os
import re
import ssl
from collections.abc import Callable
from typing import Any

from gunicorn import glogging

from broker.errors import ConfigError
from broker.settings import get_settings
from broker.telemetry.logs import configure_logging, make_formatter

#: a request id in a path or a Location header (``/requests/{id}``, ``/internal/requests/{id}``)
_REQUEST_PATH = re.compile(r"/requests/([^/?#]+)")


class GunicornLogger(glogging.Logger):  # type: ignore[misc]
    """gunicorn's error and access lines in the broker's format (``BROKER_LOG_FORMAT``), the
    access line with method, path (no query), status, duration and the broker request it names.
    The master's own root logger is set up the same way, so every line of a listener is alike."""

    def setup(self, cfg: Any) -> None:
        super().setup(cfg)
        settings = get_settings()
        configure_logging(settings)
        formatter = make_formatter(settings)
        for log in (self.error_log, self.access_log):
            for handler in log.handlers:
                handler.setFormatter(formatter)

    def access(self, resp: Any, req: Any, environ: dict[str, Any], request_time: Any) -> None:
        if not self.cfg.accesslog:
            return
        status = getattr(resp, "status_code", None)
        path = str(environ.get("PATH_INFO") or req.path or "")
        location = next((v for k, v in resp.headers if k.lower() == "location"), "")
        found = _REQUEST_PATH.search(path) or _REQUEST_PATH.search(str(location))
        method = str(environ.get("REQUEST_METHOD") or req.method)
        seconds = request_time.total_seconds()
        extra = {
            "http_method": method,
            "http_path": path,
            "http_status": status,
            "duration_ms": round(seconds * 1000, 1),
            "remote_addr": environ.get("REMOTE_ADDR"),
            "request_id": found.group(1) if found else None,
        }
        try:
            self.access_log.info("%s %s %s", method, path, status, extra=extra)
        except Exception:  # gunicorn's own habit: an access line never breaks a response
            self.error_log.exception("access line not written")


def tls_floor(conf: Any, default_ssl_context_factory: Any) -> ssl.SSLContext:
    """gunicorn's TLS hook (``ssl_version`` is ignored since gunicorn 21): no TLS below 1.2."""
    context: ssl.SSLContext = default_ssl_context_factory()
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


def forget_dead_worker(server: Any, worker: Any) -> None:
    """prometheus-client's multiprocess mode keeps per-process files; drop a dead worker's
    gauges."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):  # noqa: TID251 - prometheus-client's switch
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid)  # type: ignore[no-untyped-call]


def log_settings() -> dict[str, Any]:
    """The logging part of every listener's settings: gunicorn's lines through
    ``GunicornLogger`` on stderr. Access lines are off, as gunicorn has them, since each costs the
    ingress a write; ``--access-logfile -`` (``broker run`` passes it) turns them on, on stdout."""
    return {
        "logger_class": f"{__name__}.GunicornLogger",
        "errorlog": "-",
        "loglevel": get_settings().log_level.lower(),
    }


def build_at_boot(worker: Any, build: Callable[[], object], name: str) -> None:
    """Build a listener's app as its gunicorn worker boots, rather than on the first request. A
    bad configuration (a setting, a configuration file, a team's Python activity declaration)
    stops the listener here: gunicorn reports the worker failed to boot and exits, the error
    naming what is wrong. Anything else (the database down at boot) is logged and retried by
    the first request, which answers 503 meanwhile, so an outage does not stop boot."""
    try:
        build()
    except ConfigError as exc:
        worker.log.critical("the %s app cannot start: %s", name, exc)
        raise
    except Exception:
        worker.log.exception("the %s app could not be built at boot", name)

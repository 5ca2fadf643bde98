"""gunicorn settings of the console listener: Elsa Studio, the console pages and /elsa/api.

    gunicorn -c config/gunicorn_console.conf.py broker.console.wsgi:console

Binds BROKER_CONSOLE_BIND (loopback by default); serves TLS when BROKER_CONSOLE_TLS_CERT and
BROKER_CONSOLE_TLS_KEY are set. GUNICORN_CMD_ARGS and the command line override these defaults.
"""

import os
import ssl

from broker.logs import configure_logging
from broker.settings import get_settings

_settings = get_settings()

wsgi_app = "broker.console.wsgi:console"
bind = [_settings.console_bind]
# One control socket per listener (gunicornc), under var/ instead of the shared default in $HOME.
control_socket = str(_settings.var_path / "gunicorn-console.ctl")
if _settings.console_tls_cert:
    certfile = _settings.console_tls_cert
    keyfile = _settings.console_tls_key

# Studio downloads a few hundred files on first load; threads keep one slow client from
# holding the worker, and the precompressed files are sent with sendfile.
worker_class = "gthread"
workers = 1
threads = 16
timeout = 30
graceful_timeout = 30
keepalive = 5


def ssl_context(conf, default_ssl_context_factory):  # type: ignore[no-untyped-def]
    """No TLS below 1.2 (gunicorn ignores ``ssl_version`` since 21)."""
    context = default_ssl_context_factory()
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


def post_worker_init(worker):  # type: ignore[no-untyped-def]
    configure_logging(_settings)
    from broker.console import wsgi

    try:
        wsgi.console.app  # noqa: B018 - builds on first access
    except Exception:
        worker.log.exception("the console app could not be built at boot")


def child_exit(server, worker):  # type: ignore[no-untyped-def]
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):  # noqa: TID251 - prometheus-client's switch
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid)

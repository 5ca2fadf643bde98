"""gunicorn settings of the console listener: Elsa Studio, the console pages and /elsa/api."""

from typing import Any

from broker.serving import common
from broker.settings import get_settings
from broker.telemetry.logs import configure_logging

_settings = get_settings()

wsgi_app = "broker.serving.wsgi:console"
bind = [_settings.console_bind]
# One control socket per listener (gunicornc), under var/ instead of the shared default in $HOME.
control_socket = str(_settings.var_path.absolute() / "gunicorn-console.ctl")
logger_class = common.log_settings()["logger_class"]
errorlog = common.log_settings()["errorlog"]
loglevel = common.log_settings()["loglevel"]
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

ssl_context = common.tls_floor
child_exit = common.forget_dead_worker


def post_worker_init(worker: Any) -> None:
    configure_logging(_settings)
    from broker.serving import wsgi

    common.build_at_boot(worker, lambda: wsgi.console.app, "console")

"""gunicorn settings of the internal listener: callbacks, /healthz, /readyz, /metrics
(plain HTTP)."""

from typing import Any

from broker.serving import common
from broker.settings import get_settings
from broker.telemetry.logs import configure_logging

_settings = get_settings()

wsgi_app = "broker.serving.wsgi:internal"
bind = [_settings.internal_bind]
# One control socket per listener (gunicornc), under var/ instead of the shared default in $HOME.
control_socket = str(_settings.var_path.absolute() / "gunicorn-internal.ctl")
logger_class = common.log_settings()["logger_class"]
errorlog = common.log_settings()["errorlog"]
loglevel = common.log_settings()["loglevel"]
worker_class = "gthread"
workers = 1
threads = 8
timeout = 30
graceful_timeout = 30

child_exit = common.forget_dead_worker


def post_worker_init(worker: Any) -> None:
    configure_logging(_settings)
    from broker.serving import wsgi

    common.build_at_boot(
        worker, wsgi.internal, "internal"
    )  # with no argument: builds the Flask app

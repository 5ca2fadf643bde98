"""gunicorn settings of the public listener: the client and admin API behind mutual TLS."""

import ssl
from typing import Any

from broker.serving import common
from broker.settings import get_settings
from broker.telemetry.logs import configure_logging

_settings = get_settings()

wsgi_app = "broker.serving.wsgi:public"
bind = [_settings.public_bind]
# One control socket per listener (gunicornc), under var/ instead of the shared default in $HOME.
control_socket = str(_settings.var_path.absolute() / "gunicorn-public.ctl")
logger_class = common.log_settings()["logger_class"]
errorlog = common.log_settings()["errorlog"]
loglevel = common.log_settings()["loglevel"]

# Mutual TLS: TLS 1.2 and 1.3, client certificate required and verified against the client CA.
certfile = _settings.tls_cert
keyfile = _settings.tls_key
ca_certs = _settings.tls_client_ca
cert_reqs = ssl.CERT_REQUIRED

# gthread keeps the SSL socket in environ["gunicorn.socket"], where the app reads the peer
# certificate; threads absorb slow clients without a worker per connection.
worker_class = "gthread"
workers = 2
threads = 8
timeout = 30
graceful_timeout = 30
keepalive = 5

ssl_context = common.tls_floor
child_exit = common.forget_dead_worker


def when_ready(server: Any) -> None:
    # The workers' counters (accepted requests) on a plain-HTTP port of the master, summed from
    # the multiprocess folder they share: the mTLS port cannot be scraped without a client
    # certificate. Started before the workers fork; only the master's thread serves it. The same
    # port answers /healthz and /readyz (database and transport) for the probes, which cannot
    # pass mTLS either.
    if _settings.ingress_metrics_bind:
        from broker.adapters import health
        from broker.serving import metrics_port
        from broker.wiring.runtime import connect

        metrics_port.serve(
            _settings.ingress_metrics_bind,
            "BROKER_INGRESS_METRICS_BIND",
            ready=health.probe(_settings, connect(_settings)),
        )
        server.log.info("serving /metrics, /healthz, /readyz on %s", _settings.ingress_metrics_bind)


def post_worker_init(worker: Any) -> None:
    configure_logging(_settings)
    from broker.serving import wsgi

    # (called with no argument, ``wsgi.public`` builds the Flask app)
    common.build_at_boot(worker, wsgi.public, "public")

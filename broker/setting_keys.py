"""Every configuration key, declared once: its environment name, default, parser and meaning;
``broker.settings`` reads the environment against it, and tests check the README table and
``config/broker.env.example`` against it."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable
from typing import Any

from broker.rates import Rate, parse_rate

PREFIX = "BROKER_"


@dataclasses.dataclass(frozen=True)
class Key:
    """One configuration key: environment name, attribute name, default text, parser, meaning."""

    env: str
    attr: str
    default: str
    parse: Callable[[str], Any]
    help: str


def _bool(text: str) -> bool:
    value = text.strip().lower()
    if value in {"1", "true", "yes", "on"}:
        return True
    if value in {"0", "false", "no", "off", ""}:
        return False
    raise ValueError(f"expected true or false, got {text!r}")


def _int(text: str) -> int:
    return int(text.strip())


def _deaths(text: str) -> int:
    """A count of worker deaths: at least 1 (0 would dead-letter work that never ran), at most
    100 (past that a crashing task is no longer held back)."""
    value = int(text.strip())
    if not 1 <= value <= 100:
        raise ValueError(f"expected a whole number from 1 to 100, got {text!r}")
    return value


def _float(text: str) -> float:
    return float(text.strip())


def _positive_float(text: str) -> float:
    value = float(text.strip())
    if not 0 < value < math.inf:
        raise ValueError(f"expected a finite number of seconds above 0, got {text!r}")
    return value


def _str(text: str) -> str:
    return text.strip()


def _paths(text: str) -> tuple[str, ...]:
    return tuple(p for p in text.split(":") if p.strip())


def _csv(text: str) -> tuple[str, ...]:
    return tuple(p.strip() for p in text.split(",") if p.strip())


def _json_array(text: str) -> str:
    """JSON array text, kept as text (its items are read where they are used); empty: none."""
    if text.strip():
        try:
            value = json.loads(text)
        except ValueError as exc:
            raise ValueError(f"expected a JSON array: {exc}") from exc
        if not isinstance(value, list):
            raise ValueError("expected a JSON array")
    return text.strip()


def _rate(text: str) -> Rate:
    return parse_rate(text)


def _mode(text: str) -> str:
    value = text.strip()
    for mode in ("CounterBased", "TokenBased"):
        if value.lower() == mode.lower():
            return mode
    raise ValueError("expected CounterBased or TokenBased")


K = Key
# fmt: off
KEYS: tuple[Key, ...] = (
    # Backends and files
    K("BROKER_DATABASE_URL", "database_url", "sqlite:///var/broker.db", _str,
      "SQLAlchemy URL of the database (`postgresql+psycopg://user@host/db` in production; "
      "`user@h1:5432,h2:5432/db` names a primary and its standby, see Operations)"),
    K("BROKER_QUEUE_URL", "queue_url", "filesystem://", _str,
      "Celery broker URL; `filesystem://` keeps folders under `var/queue` (`redis://...`, `amqp://...`)"),
    K("BROKER_LOCK_URL", "lock_url", "file://var/locks", _str,
      "lock provider: `file://DIR`, `redis://...` or `postgresql://...` (advisory locks)"),
    K("BROKER_WORKFLOW_PATHS", "workflow_paths", "workflows", _paths,
      "folders scanned recursively for `*.json`, `:`-separated; later folders win on duplicates"),
    K("BROKER_WATCH_WORKFLOWS", "watch_workflows", "true", _bool,
      "watch the workflow folders and reload changed files without a restart"),
    K("BROKER_CLIENTS_FILE", "clients_file", "config/clients.json", _str,
      "mTLS client allowlist (elsa-broker's format)"),
    K("BROKER_REQUEST_TYPES_FILE", "request_types_file", "config/requestTypes.json", _str,
      "which client may submit which request type, and its required keys"),
    K("BROKER_VAR_DIR", "var_dir", "var", _str,
      "folder for the embedded database, queue, locks, certificates, mail and generated secrets"),
    # Listeners and TLS
    K("BROKER_PUBLIC_BIND", "public_bind", "0.0.0.0:5001", _str,
      "public listener (mTLS client API and admin API)"),
    K("BROKER_INTERNAL_BIND", "internal_bind", "127.0.0.1:5080", _str,
      "internal listener (callbacks, /healthz, /readyz, /metrics)"),
    K("BROKER_TLS_CERT", "tls_cert", "var/certs/server.pem", _str, "server certificate (PEM)"),
    K("BROKER_TLS_KEY", "tls_key", "var/certs/server.key", _str, "server private key (PEM)"),
    K("BROKER_TLS_CLIENT_CA", "tls_client_ca", "var/certs/ca.pem", _str,
      "CA that client certificates must chain to (PEM)"),
    K("BROKER_TRUSTED_PROXIES", "trusted_proxies", "", _csv,
      "addresses of TLS-terminating proxies allowed to pass the client certificate in a header; "
      "empty disables the proxy mode"),
    K("BROKER_PROXY_CERT_HEADER", "proxy_cert_header", "", _str,
      "header carrying the URL-encoded PEM client certificate from a trusted proxy"),
    K("BROKER_CALLBACK_SECRET", "callback_secret", "", _str,
      "secret that mints the per-request tokens remote executors sign their callbacks with (it "
      "never leaves the broker); unset: generated into `var/callback-secret` on first run; set "
      "but empty: every callback is rejected"),
    K("BROKER_CALLBACK_SECRET_PREVIOUS", "callback_secret_previous", "", _str,
      "the secret before a rotation: callbacks signed with tokens it minted are still accepted; "
      "empty once the rotation is over"),
    K("BROKER_CALLBACK_BASE_URL", "callback_base_url", "http://127.0.0.1:5080", _str,
      "base URL that a remote Elsa server calls back"),
    K("BROKER_ELSA_DISPATCH_URL", "elsa_dispatch_url", "", _str,
      "Elsa server endpoint for workflows with `customProperties.executor: \"elsa\"`"),
    K("BROKER_MAX_BODY_BYTES", "max_body_bytes", "1048576", _int, "largest accepted request body"),
    K("BROKER_MAX_JSON_DEPTH", "max_json_depth", "32", _int, "deepest accepted JSON nesting"),
    K("BROKER_MAX_JSON_KEYS", "max_json_keys", "1000", _int,
      "most object keys accepted in one request body"),
    K("BROKER_RATE_LIMIT_SUBMISSIONS", "rate_limit_submissions", "1000/second", _rate,
      "default rate of `POST /requests` per client (`<count>/<unit>`: a bucket of count tokens "
      "refilled at count per second, minute, hour or day); `unlimited` or empty: no limit"),
    K("BROKER_RATE_LIMIT_EVENTS", "rate_limit_events", "1000/second", _rate,
      "default rate of `POST /events/{name}` per client, in the same form"),
    K("BROKER_RATE_LIMIT_SIGN_IN", "rate_limit_sign_in", "10/minute", _rate,
      "console sign-in attempts (form and `identity/login`) per user name and, apart, per "
      "address, in the same form; over it `429` with `Retry-After`, before any password is hashed"),
    K("BROKER_RATE_LIMIT_URL", "rate_limit_url", "", _str,
      "where the rate-limit buckets live, shared by every ingress process: `redis://...`, "
      "`postgresql://...` (the broker's database) or `file://DIR`; empty: the Redis of the lock "
      "or queue URL if either is one, else the database with PostgreSQL locks, else "
      "`var/ratelimits`"),
    K("BROKER_SUBMIT_BATCH_MAX", "submit_batch_max", "64", _int,
      "most submissions of one ingress process committed together in one transaction"),
    K("BROKER_SUBMIT_BATCH_WINDOW", "submit_batch_window", "0", _float,
      "seconds a submission waits for others to share its transaction (bounded by "
      "`BROKER_SUBMIT_BATCH_MAX`); 0: none, those that arrived during the previous commit"),
    # Console (Elsa Studio, the console pages and the Elsa API)
    K("BROKER_CONSOLE_BIND", "console_bind", "127.0.0.1:5090", _str,
      "console listener (Elsa Studio, the console pages, `/elsa/api`)"),
    K("BROKER_CONSOLE_TLS_CERT", "console_tls_cert", "", _str,
      "console server certificate (PEM); empty serves plain HTTP"),
    K("BROKER_CONSOLE_TLS_KEY", "console_tls_key", "", _str, "console server private key (PEM)"),
    K("BROKER_CONSOLE_CORS_ORIGINS", "console_cors_origins", "", _csv,
      "origins allowed to call `/elsa/api` from a browser (a Studio hosted elsewhere), "
      "comma-separated; empty allows none"),
    K("BROKER_CONSOLE_SECRET", "console_secret", "", _str,
      "key signing console tokens and sessions; unset: generated into `var/console-secret` on "
      "first run (set the same value on every console host)"),
    K("BROKER_CONSOLE_TOKEN_TTL", "console_token_ttl", "900", _int,
      "seconds an access token from `identity/login` (or a page) stays valid"),
    K("BROKER_CONSOLE_REFRESH_TTL", "console_refresh_ttl", "28800", _int,
      "seconds a refresh token and a console sign-in session stay valid"),
    K("BROKER_CONSOLE_ASSETS_DIR", "console_assets_dir", "", _str,
      "where `make install` unpacks Elsa Studio and mermaid.js; empty: `share/broker-console` "
      "in the Python environment"),
    # Process model
    K("BROKER_DISTRIBUTED", "distributed", "false", _bool,
      "processes run on more than one host (file locks are then not enough)"),
    K("BROKER_ALLOW_LOCAL_LOCKS", "allow_local_locks", "false", _bool,
      "acknowledge host-local file locks when distributed (silences the startup warning)"),
    K("BROKER_PROFILE", "profile", "", _str,
      "the `broker` command's client profile (URL, certificates, console) that `broker run` "
      "writes; empty: `cli-profile.json` in the var folder"),
    K("BROKER_LOG_LEVEL", "log_level", "INFO", _str, "logging level"),
    K("BROKER_LOG_FORMAT", "log_format", "json", _str, "`json` (one object per line) or `text`"),
    K("BROKER_WORKER_METRICS_BIND", "worker_metrics_bind", "", _str,
      "`host:port` where each Celery worker serves its own `/metrics` (for workers on other "
      "hosts than the internal listener); empty: off"),
    K("BROKER_INGRESS_METRICS_BIND", "ingress_metrics_bind", "", _str,
      "`host:port` where the public listener's gunicorn master serves the `/metrics` of its "
      "workers (plain HTTP, apart from the mTLS port); empty: off"),
    K("BROKER_WORKER_HEARTBEAT_FILE", "worker_heartbeat_file", "", _str,
      "file each Celery worker touches every 10 s from its event loop, for a cheap liveness "
      "probe (its age); empty: off"),
    K("BROKER_WORKER_CONCURRENCY", "worker_concurrency", "2", _int,
      "worker processes started by `broker run`"),
    # Workflow execution
    K("BROKER_TASK_MODULES", "task_modules", "tasks", _csv,
      "modules whose Celery tasks RunTask may call and whose Python activities load, "
      "comma-separated"),
    K("BROKER_HTTP_ALLOWLIST", "http_allowlist", "", _csv,
      "outbound hosts for HTTP activities, `host[:port]` patterns with `*`; empty allows public "
      "addresses only"),
    K("BROKER_HTTP_TIMEOUT", "http_timeout", "30", _float,
      "seconds an outbound HTTP call may take"),
    K("BROKER_HTTP_MAX_RESPONSE_BYTES", "http_max_response_bytes", "10485760", _int,
      "largest outbound HTTP response read"),
    K("BROKER_HTTP_TRIGGER_WAIT", "http_trigger_wait", "30", _float,
      "seconds `/workflows/{path}` waits for the workflow's WriteHttpResponse before it answers "
      "`202` with the request's Location"),
    K("BROKER_RESILIENCE_STRATEGIES", "resilience_strategies", "", _json_array,
      "resilience strategies HTTP activities name by id (`customProperties.resilienceStrategy`), "
      "a JSON array in Elsa's `Resilience:Strategies` shape: `[{\"$type\": "
      "\"HttpResilienceStrategy\", \"id\": \"retry-3\", \"maxRetryAttempts\": 3, "
      "\"delay\": \"00:00:01\", \"backoffType\": \"Exponential\"}]`; empty: none"),
    K("BROKER_FILE_STORAGE_URL", "file_storage_url", "file://var/files", _str,
      "where DownloadHttpFile and WriteFileHttpResponse keep files: `file://DIR`"),
    K("BROKER_FILE_MAX_BYTES", "file_max_bytes", "10485760", _int,
      "largest file downloaded or stored"),
    K("BROKER_FILE_RETENTION", "file_retention", "2592000", _float,
      "seconds a stored file is kept (the purge job removes older ones)"),
    K("BROKER_SIMULATE_RESPONSE_SESSIONS", "simulate_response_sessions", "1000", _int,
      "most open sessions of the console's `/elsa/api/simulate-response` (Elsa.Resilience's "
      "endpoint for trying a resilience strategy); past it a new session is `429`"),
    K("BROKER_SIMULATE_RESPONSE_SESSION_TTL", "simulate_response_session_ttl", "900", _float,
      "seconds a simulate-response session lives after its last call"),
    K("BROKER_SIMULATE_RESPONSE_MAX_CODES", "simulate_response_max_codes", "32", _int,
      "most status codes one simulate-response call may name"),
    K("BROKER_SIMULATE_RESPONSE_MAX_CODES_LENGTH", "simulate_response_max_codes_length", "1024",
      _int,
      "longest `codes` query text of a simulate-response call"),
    K("BROKER_SIMULATE_RESPONSE_MAX_SESSION_ID", "simulate_response_max_session_id", "128", _int,
      "longest `sessionId` of a simulate-response call"),
    K("BROKER_SMTP_URL", "smtp_url", "file://var/mail", _str,
      "where SendEmail delivers: `smtp://host:port`, `file://DIR` or `console://`"),
    K("BROKER_SMTP_FROM", "smtp_from", "broker@localhost", _str, "default sender of SendEmail"),
    K("BROKER_FLOWCHART_MODE", "flowchart_mode", "CounterBased", _mode,
      "default flowchart join mode (`CounterBased` or `TokenBased`)"),
    K("BROKER_JS_TIME_LIMIT", "js_time_limit", "1.0", _float,
      "seconds one JavaScript evaluation may run"),
    K("BROKER_JS_MEMORY_LIMIT", "js_memory_limit", "33554432", _int,
      "bytes one JavaScript evaluation may allocate"),
    K("BROKER_STEP_TIME_LIMIT", "step_time_limit", "300", _positive_float,
      "seconds one workflow step may run; then it faults and its worker process is replaced"),
    K("BROKER_ACTIVITY_TIME_LIMIT", "activity_time_limit", "300", _positive_float,
      "seconds one call of a task-mode Python activity may run unless it declares its own "
      "`time_limit`; then it faults and its worker process is replaced"),
    K("BROKER_RETRY_MAX_ATTEMPTS", "retry_max_attempts", "5", _int,
      "default attempts of an activity that fails transiently"),
    K("BROKER_RETRY_INITIAL_DELAY", "retry_initial_delay", "1", _float,
      "default first retry delay, seconds (exponential backoff, full jitter)"),
    K("BROKER_RETRY_MAX_DELAY", "retry_max_delay", "300", _float, "default largest retry delay"),
    # Delivery and maintenance
    K("BROKER_TASK_VISIBILITY_TIMEOUT", "task_visibility_timeout", "3600", _int,
      "seconds before an unacknowledged Redis message is delivered again"),
    K("BROKER_LOCK_TTL", "lock_ttl", "30", _float,
      "seconds a distributed lock lives unless extended"),
    K("BROKER_OUTBOX_RELAY_INTERVAL", "outbox_relay_interval", "1", _float,
      "seconds between outbox relay runs"),
    K("BROKER_OUTBOX_BATCH_SIZE", "outbox_batch_size", "100", _int,
      "outbox rows claimed per batch"),
    K("BROKER_OUTBOX_LEASE", "outbox_lease", "60", _float,
      "seconds a dispatched outbox row may stay unfinished before it is published again"),
    K("BROKER_MAX_OUTBOX_DELIVERY_ATTEMPTS", "max_outbox_delivery_attempts", "10", _int,
      "publish attempts before an outbox row becomes a dead letter"),
    K("BROKER_MAX_WORKER_DEATHS", "max_worker_deaths", "3", _deaths,
      "deliveries of one piece of work that may end with its worker process dead (a segfault, an "
      "OOM kill, os._exit) before the work is dead-lettered instead of run again"),
    K("BROKER_ORPHANED_OUTBOX_RETENTION", "orphaned_outbox_retention", "86400", _float,
      "seconds before orphaned outbox rows are removed"),
    K("BROKER_BOOKMARK_QUEUE_INTERVAL", "bookmark_queue_interval", "1", _float,
      "seconds between bookmark-queue processing runs"),
    K("BROKER_BOOKMARK_QUEUE_MAX_DELIVERY_ATTEMPTS", "bookmark_queue_max_delivery_attempts", "3",
      _int, "failed processing attempts before a queue item is dead-lettered"),
    K("BROKER_BOOKMARK_QUEUE_TTL", "bookmark_queue_ttl", "600", _float,
      "seconds an unmatched queue item waits before it is dead-lettered as Expired"),
    K("BROKER_DEAD_LETTER_TTL", "dead_letter_ttl", "604800", _float,
      "seconds before dead letters are purged"),
    K("BROKER_TIMER_INTERVAL", "timer_interval", "1", _float, "seconds between timer firing runs"),
    K("BROKER_HEARTBEAT_INTERVAL", "heartbeat_interval", "10", _float,
      "seconds between heartbeats of a running instance"),
    K("BROKER_INACTIVITY_THRESHOLD", "inactivity_threshold", "300", _float,
      "seconds without a heartbeat before a running instance is recovered"),
    K("BROKER_RECOVERY_INTERVAL", "recovery_interval", "30", _float,
      "seconds between stalled-instance recovery runs"),
    K("BROKER_PURGE_INTERVAL", "purge_interval", "3600", _float,
      "seconds between purge runs (dead letters, orphaned outbox rows, old results, stored "
      "files past their retention)"),
    K("BROKER_RESULT_RETENTION", "result_retention", "2592000", _float,
      "seconds a finished request's workflow state is kept (the request and its audit stay)"),
    K("BROKER_DRAIN_TIMEOUT", "drain_timeout", "30", _float,
      "seconds a worker stopping on SIGTERM has to checkpoint and requeue"),
    # Webhooks
    K("BROKER_WEBHOOK_HORIZON", "webhook_horizon", "259200", _float,
      "seconds a webhook delivery is retried before it becomes a dead letter (an endpoint failing "
      "that long is disabled)"),
    K("BROKER_WEBHOOK_RETRY_INITIAL_DELAY", "webhook_retry_initial_delay", "30", _float,
      "first webhook retry delay, seconds; each next one is 5 times longer (with jitter), the "
      "last attempt falls on the horizon"),
    K("BROKER_WEBHOOK_TIMEOUT", "webhook_timeout", "10", _float,
      "seconds one webhook delivery attempt may take"),
    K("BROKER_WEBHOOK_SECRET_OVERLAP", "webhook_secret_overlap", "86400", _float,
      "seconds the previous secret of a rotated webhook endpoint still signs deliveries"),
)
# fmt: on
del K

KEY_BY_ENV = {k.env: k for k in KEYS}

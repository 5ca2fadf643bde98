"""Configuration: the one place that reads the environment, against ``KEYS``
(``broker/setting_keys.py``); ``Settings.from_env`` converts each value to its type and warns about
``BROKER_*`` names it does not know."""

from __future__ import annotations

import dataclasses
import logging
import os
import secrets
import sys
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from broker.errors import ConfigError
from broker.rates import Rate
from broker.setting_keys import KEY_BY_ENV, KEYS, PREFIX

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Settings:
    """The process's configuration, built from a mapping of environment variables."""

    database_url: str
    queue_url: str
    lock_url: str
    workflow_paths: tuple[str, ...]
    watch_workflows: bool
    clients_file: str
    request_types_file: str
    var_dir: str
    public_bind: str
    internal_bind: str
    console_bind: str
    console_tls_cert: str
    console_tls_key: str
    console_cors_origins: tuple[str, ...]
    console_secret: str
    console_token_ttl: int
    console_refresh_ttl: int
    console_assets_dir: str
    tls_cert: str
    tls_key: str
    tls_client_ca: str
    trusted_proxies: tuple[str, ...]
    proxy_cert_header: str
    callback_secret: str
    callback_secret_previous: str
    callback_base_url: str
    elsa_dispatch_url: str
    max_body_bytes: int
    max_json_depth: int
    max_json_keys: int
    rate_limit_submissions: Rate
    rate_limit_events: Rate
    rate_limit_url: str
    submit_batch_max: int
    submit_batch_window: float
    distributed: bool
    allow_local_locks: bool
    profile: str
    log_level: str
    log_format: str
    worker_metrics_bind: str
    ingress_metrics_bind: str
    worker_heartbeat_file: str
    worker_concurrency: int
    task_modules: tuple[str, ...]
    http_allowlist: tuple[str, ...]
    http_timeout: float
    http_max_response_bytes: int
    http_trigger_wait: float
    resilience_strategies: str
    file_storage_url: str
    file_max_bytes: int
    file_retention: float
    simulate_response_sessions: int
    simulate_response_session_ttl: float
    simulate_response_max_codes: int
    simulate_response_max_codes_length: int
    simulate_response_max_session_id: int
    smtp_url: str
    smtp_from: str
    flowchart_mode: str
    js_time_limit: float
    js_memory_limit: int
    step_time_limit: float
    retry_max_attempts: int
    retry_initial_delay: float
    retry_max_delay: float
    task_visibility_timeout: int
    lock_ttl: float
    outbox_relay_interval: float
    outbox_batch_size: int
    outbox_lease: float
    max_outbox_delivery_attempts: int
    orphaned_outbox_retention: float
    bookmark_queue_interval: float
    bookmark_queue_max_delivery_attempts: int
    bookmark_queue_ttl: float
    dead_letter_ttl: float
    timer_interval: float
    heartbeat_interval: float
    inactivity_threshold: float
    recovery_interval: float
    purge_interval: float
    result_retention: float
    drain_timeout: float
    webhook_horizon: float
    webhook_retry_initial_delay: float
    webhook_timeout: float
    webhook_secret_overlap: float
    #: whether BROKER_CALLBACK_SECRET was given at all (unset means: generate one)
    callback_secret_set: bool = False
    #: whether BROKER_CONSOLE_SECRET was given at all (unset means: generate one)
    console_secret_set: bool = False

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Build settings from ``environ`` (the process environment when None)."""
        env: Mapping[str, str] = os.environ if environ is None else environ  # noqa: TID251
        values: dict[str, Any] = {}
        for key in KEYS:
            raw = env.get(key.env, key.default)
            try:
                values[key.attr] = key.parse(raw)
            except ValueError as exc:
                raise ConfigError(f"{key.env}={raw!r} is invalid: {exc}") from exc
        unknown = sorted(n for n in env if n.startswith(PREFIX) and n not in KEY_BY_ENV)
        for name in unknown:
            warnings.warn(
                f"unknown configuration key {name} is ignored", UnknownKeyWarning, stacklevel=2
            )
        return cls(
            **values,
            callback_secret_set="BROKER_CALLBACK_SECRET" in env,
            console_secret_set="BROKER_CONSOLE_SECRET" in env,
        )

    def replace(self, **changes: Any) -> Settings:
        """A copy with some attributes changed (tests and the CLI use it)."""
        if "callback_secret" in changes:
            changes.setdefault("callback_secret_set", True)
        if "console_secret" in changes:
            changes.setdefault("console_secret_set", True)
        return dataclasses.replace(self, **changes)

    @property
    def var_path(self) -> Path:
        return Path(self.var_dir)

    def resolved_callback_secret(self) -> str:
        """The callback secret: the configured one, or one generated once into the var folder."""
        if self.callback_secret_set:
            return self.callback_secret
        return self._generated_secret("callback-secret")

    def resolved_console_secret(self) -> str:
        """The console's signing key: the configured one, or one generated once into var/."""
        if self.console_secret_set:
            if len(self.console_secret) < 32:
                raise ConfigError("BROKER_CONSOLE_SECRET must be at least 32 characters")
            return self.console_secret
        return self._generated_secret("console-secret")

    def _generated_secret(self, name: str) -> str:
        path = self.var_path / name
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:  # another process won the race: read its secret
                return path.read_text().strip()
            with os.fdopen(fd, "w") as fh:
                fh.write(secrets.token_urlsafe(32))
        return path.read_text().strip()

    def callback_secrets(self) -> tuple[str, ...]:
        """The live callback secrets, current first; empty when callbacks are disabled (an empty
        current secret disables them, whatever the previous one)."""
        current = self.resolved_callback_secret()
        if not current:
            return ()
        previous = self.callback_secret_previous
        return (current, previous) if previous and previous != current else (current,)

    @property
    def console_assets_path(self) -> Path:
        """Where Elsa Studio and mermaid.js are unpacked (outside the repository's files)."""
        if self.console_assets_dir:
            return Path(self.console_assets_dir)
        return Path(sys.prefix) / "share" / "broker-console"


def given_keys(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The known ``BROKER_*`` keys that ``environ`` (the process environment when None) sets."""
    env: Mapping[str, str] = os.environ if environ is None else environ  # noqa: TID251
    return {name: env[name] for name in KEY_BY_ENV if name in env}


class UnknownKeyWarning(UserWarning):
    """Raised (as a warning) when the environment holds a ``BROKER_*`` name that is not a key."""


_current: Settings | None = None


def get_settings() -> Settings:
    """The settings of this process, read from the environment once."""
    global _current
    if _current is None:
        _current = Settings.from_env()
    return _current


def set_settings(settings: Settings | None) -> None:
    """Install settings for this process (tests and the CLI); None re-reads the environment."""
    global _current
    _current = settings

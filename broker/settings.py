"""Configuration: the one place that reads the environment, against ``KEYS``
(``broker/setting_keys.py``); ``Settings.from_env`` converts each value to its type and warns about
``BROKER_*`` names it does not know."""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import secrets
import sys
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from broker.errors import ConfigError
from broker.rates import Rate
from broker.safety.private_files import create_private, read_private
from broker.setting_keys import KEY_BY_ENV, KEYS, PREFIX

logger = logging.getLogger(__name__)

#: the settings that are secrets themselves
SECRET_KEYS = ("BROKER_CONSOLE_SECRET", "BROKER_CALLBACK_SECRET", "BROKER_CALLBACK_SECRET_PREVIOUS")
#: the settings whose URL may carry a password
URL_KEYS = (
    "BROKER_DATABASE_URL",
    "BROKER_QUEUE_URL",
    "BROKER_LOCK_URL",
    "BROKER_RATE_LIMIT_URL",
    "BROKER_SMTP_URL",
)
#: secrets a broker process is given beside its settings (Flower's login, libpq's password)
OTHER_SECRETS = ("FLOWER_PASSWORD", "PGPASSWORD")
#: what the shipped examples (config/, deploy/) put where a secret goes, and its usual spellings
_PLACEHOLDER = re.compile(r"replace|change[-_ ]?me|placeholder|<[^>]*>", re.IGNORECASE)
CONSOLE_SECRET_MIN = 32


def is_placeholder(value: str) -> bool:
    """Whether ``value`` is a stand-in for a secret rather than one: it says REPLACE (as every
    shipped example does), CHANGE-ME or PLACEHOLDER, or holds an ``<angle-bracket>`` hint. The
    one rule every secret setting is checked against (a weak secret is another matter)."""
    return bool(_PLACEHOLDER.search(value.strip()))


def refuse_placeholders(env: Mapping[str, str]) -> None:
    """``ConfigError`` naming the first secret of ``env`` that is a placeholder: a secret setting,
    the password of a URL setting, or Flower's or libpq's password."""
    for name in (*SECRET_KEYS, *OTHER_SECRETS):
        value = env.get(name)
        if value and is_placeholder(value):
            raise ConfigError(
                f"{name} is a placeholder ({_shown(value)}): set a real secret", field=name
            )
    for name in URL_KEYS:
        value = env.get(name) or ""
        try:
            password = urlsplit(value.strip()).password
        except ValueError:
            continue  # the key's own parser says what is wrong with it
        if password and is_placeholder(password):
            raise ConfigError(
                f"{name} holds a placeholder password ({_shown(password)}): set the real one",
                field=name,
            )


def _under_var_dir(default: str, var_dir: str) -> str:
    """A default that names a place under ``var/`` (the embedded database, locks, certificates,
    files, mail), moved under ``BROKER_VAR_DIR`` when that is set; any other default unchanged."""
    if not var_dir or var_dir.rstrip("/") == "var":
        return default
    return _VAR_PREFIX.sub(lambda m: m.group(1) + var_dir.rstrip("/") + "/", default, count=1)


_VAR_PREFIX = re.compile(r"^((?:[a-z]+://)?/?)var/")


def _shown(value: str) -> str:
    """A placeholder as an error shows it: the marker, not a secret (it is none), shortened."""
    text = value.strip()
    return repr(text if len(text) <= 24 else text[:21] + "...")


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
    rate_limit_sign_in: Rate
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
    activity_time_limit: float
    retry_max_attempts: int
    retry_initial_delay: float
    retry_max_delay: float
    task_visibility_timeout: int
    lock_ttl: float
    outbox_relay_interval: float
    outbox_batch_size: int
    outbox_lease: float
    max_outbox_delivery_attempts: int
    max_worker_deaths: int
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
        var_dir = env.get("BROKER_VAR_DIR", "").strip()
        for key in KEYS:
            raw = env.get(key.env, _under_var_dir(key.default, var_dir))
            try:
                values[key.attr] = key.parse(raw)
            except ValueError as exc:
                raise ConfigError(f"{key.env}={raw!r} is invalid: {exc}") from exc
        refuse_placeholders(env)
        if values["max_worker_deaths"] >= values["max_outbox_delivery_attempts"]:
            raise ConfigError(
                f"BROKER_MAX_WORKER_DEATHS={values['max_worker_deaths']} must be below "
                f"BROKER_MAX_OUTBOX_DELIVERY_ATTEMPTS={values['max_outbox_delivery_attempts']}: "
                "otherwise work that kills its worker is given up as undeliverable first",
                field="BROKER_MAX_WORKER_DEATHS",
            )
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
            refuse_placeholders({"BROKER_CALLBACK_SECRET": self.callback_secret})
            return self.callback_secret
        return self._generated_secret("callback-secret")

    def resolved_console_secret(self) -> str:
        """The console's signing key: the configured one, or one generated once into var/."""
        if self.console_secret_set:
            if len(self.console_secret) < CONSOLE_SECRET_MIN:
                raise ConfigError(
                    f"BROKER_CONSOLE_SECRET must be at least {CONSOLE_SECRET_MIN} characters"
                )
            refuse_placeholders({"BROKER_CONSOLE_SECRET": self.console_secret})
            return self.console_secret
        return self._generated_secret("console-secret")

    def _generated_secret(self, name: str) -> str:
        """The secret in ``var/<name>``, made on first use (0600, never through a link; a
        concurrent first run keeps the one that was there first), read only when no one else
        can have written it."""
        path = self.var_path / name
        create_private(path, secrets.token_urlsafe(32))
        value = read_private(path, f"the generated secret {name}").strip()
        if not value:
            raise ConfigError(f"the generated secret {path} is empty", path=str(path))
        return value

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

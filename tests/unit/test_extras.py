"""Optional parts come with extras; without one, the feature that needs it says which to install,
naming the setting that asked for it, instead of failing on an import."""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest
from click.testing import CliRunner

from broker.adapters.locks import PostgresLockProvider
from broker.cli.supervise import flower
from broker.errors import ConfigError
from broker.store import db


def without(module: str, monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec

    def find_spec(name: str, *args: Any, **kwargs: Any) -> Any:
        return None if name == module else real(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)


def test_a_postgresql_database_without_the_postgres_extra_names_the_setting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    without("psycopg", monkeypatch)
    with pytest.raises(ConfigError, match=r"elsa-celery-broker\[postgres\]") as caught:
        db.make_engine("postgresql+psycopg://broker@127.0.0.1:1/none-without-extra")
    assert caught.value.details["field"] == "BROKER_DATABASE_URL"


def test_postgresql_locks_without_the_postgres_extra_name_the_setting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    without("psycopg", monkeypatch)
    with pytest.raises(ConfigError, match=r"elsa-celery-broker\[postgres\]") as caught:
        PostgresLockProvider("postgresql://broker@127.0.0.1:1/x")
    assert caught.value.details["field"] == "BROKER_LOCK_URL"


def test_flower_without_its_extra_says_which_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    without("flower", monkeypatch)
    result = CliRunner().invoke(flower, [])
    assert result.exit_code == 1
    assert "elsa-celery-broker[flower]" in result.output


def test_traces_asked_for_without_the_otel_extra_say_which_to_install(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import sys

    from broker.telemetry import tracing

    # Given the OTEL_* variables ask for traces but the SDK cannot be imported
    monkeypatch.setitem(sys.modules, "opentelemetry.sdk.trace", None)
    environ = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}
    # Then tracing stays off, and the log names the extra
    assert tracing.configure("elsa-celery-broker", environ) is False
    assert not tracing.enabled()
    assert "elsa-celery-broker[otel]" in caplog.text

"""`broker run`'s preparation: the development PKI in the broker's own folder only; an operator's
PKI (RSA or EC, the CA's key kept elsewhere) used as given, with no client of the broker's own."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
from sqlalchemy import select

from broker.cli import supervise
from broker.clients import certificates as certs
from broker.errors import ConfigError
from broker.settings import Settings
from broker.store import db
from broker.store.models import Client
from tests.support.ingress import OperatorPki, make_operator_pki


def _settings(var: Path, **env: str) -> Settings:
    return Settings.from_env(
        {
            "BROKER_VAR_DIR": str(var),
            "BROKER_DATABASE_URL": f"sqlite:///{var / 'broker.db'}",
            "BROKER_WATCH_WORKFLOWS": "false",
            **env,
        }
    )


def _registered(settings: Settings) -> list[str]:
    factory = db.make_session_factory(db.make_engine(settings.database_url))
    try:
        with factory() as session:
            return list(session.scalars(select(Client.client_id)))
    finally:
        db.dispose_engines()


@pytest.fixture(params=["rsa", "ec"])
def operator_pki(request: pytest.FixtureRequest, tmp_path: Path) -> OperatorPki:
    return make_operator_pki(tmp_path / "operator", str(request.param))


def test_prepare_on_an_operator_pki_creates_and_registers_nothing(
    operator_pki: OperatorPki, tmp_path: Path
) -> None:
    # Given an operator's folder with the CA certificate only (its key lives elsewhere)
    settings = _settings(tmp_path / "var", **operator_pki.environment())
    before = {p.name: p.read_bytes() for p in operator_pki.folder.iterdir()}
    # When broker run prepares
    supervise.prepare(settings)
    # Then nothing was written into the operator's folder, and no client was registered
    assert {p.name: p.read_bytes() for p in operator_pki.folder.iterdir()} == before
    assert _registered(settings) == []
    assert not (tmp_path / "var" / "certs").exists()
    # And the hints printed at start name no DevClient file
    assert "DevClient" not in supervise.quick_start_text(settings)


def test_prepare_in_the_development_folder_creates_the_pki_and_dev_client(
    tmp_path: Path,
) -> None:
    var = tmp_path / "var"
    settings = _settings(
        var,
        BROKER_TLS_CERT=str(var / "certs" / "server.pem"),
        BROKER_TLS_KEY=str(var / "certs" / "server.key"),
        BROKER_TLS_CLIENT_CA=str(var / "certs" / "ca.pem"),
    )
    assert certs.development_folder(settings) == var / "certs"
    supervise.prepare(settings)
    for name in ("ca.pem", "ca.key", "server.pem", "server.key", "DevClient.pem"):
        assert (var / "certs" / name).exists(), name
    assert _registered(settings) == ["DevClient"]
    assert "DevClient.pem" in supervise.quick_start_text(settings)


def test_the_default_tls_settings_are_the_development_folder(tmp_path: Path) -> None:
    assert certs.development_folder(Settings.from_env({})) == Path("var/certs")
    # A folder elsewhere, or other file names in the broker's folder, are an operator's
    elsewhere = tmp_path / "pki"
    assert (
        certs.development_folder(
            Settings.from_env({"BROKER_TLS_CLIENT_CA": str(elsewhere / "ca.pem")})
        )
        is None
    )
    renamed = {"BROKER_TLS_CERT": "var/certs/broker.example.pem"}
    assert certs.development_folder(Settings.from_env(renamed)) is None


def test_check_pki_names_the_setting_of_a_missing_or_mismatched_file(
    operator_pki: OperatorPki, tmp_path: Path
) -> None:
    env = operator_pki.environment()
    missing = _settings(tmp_path, **{**env, "BROKER_TLS_CLIENT_CA": str(tmp_path / "no.pem")})
    with pytest.raises(ConfigError, match=r"BROKER_TLS_CLIENT_CA=.*cannot be read"):
        certs.check_pki(missing)
    # A key of another certificate (the client's) does not match the server certificate
    other_key = str(operator_pki.client[1])
    with pytest.raises(ConfigError, match=r"BROKER_TLS_KEY=.*does not match"):
        certs.check_pki(_settings(tmp_path, **{**env, "BROKER_TLS_KEY": other_key}))
    with pytest.raises(ConfigError, match=r"BROKER_TLS_CERT=.*no PEM certificate"):
        certs.check_pki(
            _settings(
                tmp_path, **{**env, "BROKER_TLS_CERT": str(operator_pki.folder / "server.key")}
            )
        )
    # Nothing was created in the operator's folder by any of it
    assert sorted(p.name for p in operator_pki.folder.iterdir()) == [
        "ca.pem",
        "server.key",
        "server.pem",
    ]


def test_a_client_can_be_issued_from_an_ec_ca(tmp_path: Path) -> None:
    pki = make_operator_pki(tmp_path, "ec")
    # The helper issued Ops with the EC CA key; it chains to the CA
    ca = certs.load_certificate((pki.folder / "ca.pem").read_bytes())
    ops = certs.load_certificate(pki.client[0].read_bytes())
    ops.verify_directly_issued_by(ca)


def test_the_listeners_settings_are_package_modules_so_run_works_from_any_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a folder that is not the checkout
    monkeypatch.chdir(tmp_path)
    # Then every gunicorn role names its settings as a module of the package, which imports
    for role in supervise.roles(Settings.from_env({})):
        if "gunicorn" not in role.argv:
            continue
        location = role.argv[role.argv.index("-c") + 1]
        assert location.startswith("python:broker.serving."), role
        module = importlib.import_module(location.removeprefix("python:"))
        assert module.logger_class == "broker.serving.common.GunicornLogger"

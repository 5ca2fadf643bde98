"""Certificate tooling: files, idempotence, key modes, SANs, fingerprints and the click group."""

from __future__ import annotations

import hashlib
import ipaddress
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding
from sqlalchemy.orm import Session, sessionmaker

from broker.cli.certs import certs as certs_command
from broker.clients import certificates as certs
from broker.clients.registry import ClientRegistry
from broker.errors import ConfigError
from broker.settings import Settings, set_settings
from broker.store import models


def test_init_creates_a_ca_once_and_force_replaces_it(tmp_path: Path) -> None:
    first = certs.init_ca(tmp_path).read_bytes()
    again = certs.init_ca(tmp_path).read_bytes()
    forced = certs.init_ca(tmp_path, force=True).read_bytes()
    assert first == again
    assert forced != first


def test_keys_are_written_0600(tmp_path: Path) -> None:
    certs.init_ca(tmp_path)
    certs.issue_server(tmp_path, "broker.example")
    certs.issue_client(tmp_path, "ClientA")
    for name in ("ca.key", "server.key", "ClientA.key"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o600


def test_server_certificate_names_the_host_and_loopback(tmp_path: Path) -> None:
    certs.init_ca(tmp_path)
    cert = x509.load_pem_x509_certificate(
        certs.issue_server(tmp_path, "broker.example").read_bytes()
    )
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["broker.example", "localhost"]
    assert san.get_values_for_type(x509.IPAddress) == [
        ipaddress.ip_address("127.0.0.1"),
        ipaddress.ip_address("::1"),
    ]


def test_thumbprint_is_upper_hex_sha1_of_the_der(tmp_path: Path) -> None:
    certs.init_ca(tmp_path)
    pem = certs.issue_client(tmp_path, "ClientA")
    der = x509.load_pem_x509_certificate(pem.read_bytes()).public_bytes(Encoding.DER)
    assert certs.thumbprint(pem) == hashlib.sha1(der).hexdigest().upper()  # noqa: S324
    assert certs.fingerprint_sha256(pem) == hashlib.sha256(der).hexdigest().upper()


def test_issuing_needs_a_ca_and_a_safe_client_id(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no CA"):
        certs.issue_client(tmp_path, "ClientA")
    certs.init_ca(tmp_path)
    for bad in ("../evil", "ca", "a/b", ""):
        with pytest.raises(ConfigError):
            certs.issue_client(tmp_path, bad)


def test_cli_init_server_client_and_thumbprint(tmp_path: Path) -> None:
    runner = CliRunner()
    folder = str(tmp_path)
    assert "created" in runner.invoke(certs_command, ["init", "--dir", folder]).output
    assert "kept" in runner.invoke(certs_command, ["init", "--dir", folder]).output
    assert runner.invoke(certs_command, ["server", "localhost", "--dir", folder]).exit_code == 0
    client = runner.invoke(certs_command, ["client", "ClientA", "--dir", folder])
    printed = runner.invoke(certs_command, ["thumbprint", str(tmp_path / "ClientA.pem")])
    assert client.exit_code == 0
    assert printed.output.strip() == certs.thumbprint(tmp_path / "ClientA.pem")
    assert f"thumbprint {printed.output.strip()}" in client.output


def test_cli_client_register_grants_no_admin_scope_unless_named(
    ingress_settings: Settings, session_factory: sessionmaker[Session], tmp_path: Path
) -> None:
    # Given a database and the settings of this process
    set_settings(ingress_settings)
    try:
        runner = CliRunner()
        folder = str(tmp_path / "pki")
        runner.invoke(certs_command, ["init", "--dir", folder])
        # When a client is issued with --register alone, and another naming scopes (repeated,
        # or comma-separated)
        plain = runner.invoke(certs_command, ["client", "Plain", "--dir", folder, "--register"])
        ops = runner.invoke(
            certs_command,
            [
                "client",
                "Ops",
                "--dir",
                folder,
                "--register",
                "--scope",
                "read:dead-letters,read:workflow-runtime",
                "--scope",
                "replay:dead-letters",
            ],
        )
    finally:
        set_settings(None)
    # Then the first holds no scope at all, the second exactly the named ones
    assert plain.exit_code == 0, plain.output
    assert "scopes: none" in plain.output
    assert ops.exit_code == 0, ops.output
    registry = ClientRegistry(ingress_settings, session_factory)
    registry.load()
    plain_client, ops_client = registry.get("Plain"), registry.get("Ops")
    assert plain_client is not None
    assert plain_client.scopes == frozenset()
    assert plain_client.thumbprint == certs.thumbprint(tmp_path / "pki" / "Plain.pem")
    assert ops_client is not None
    assert ops_client.scopes == frozenset(
        {"read:dead-letters", "read:workflow-runtime", "replay:dead-letters"}
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--register", "--scope", "read:everything"], "unknown scope read:everything"),
        (["--scope", "read:dead-letters"], "on --register only"),
    ],
)
def test_cli_client_refuses_unknown_or_unregistered_scopes_and_issues_nothing(
    ingress_settings: Settings,
    session_factory: sessionmaker[Session],
    tmp_path: Path,
    args: list[str],
    message: str,
) -> None:
    set_settings(ingress_settings)
    try:
        runner = CliRunner()
        folder = tmp_path / "pki"
        runner.invoke(certs_command, ["init", "--dir", str(folder)])
        result = runner.invoke(certs_command, ["client", "Ops", "--dir", str(folder), *args])
    finally:
        set_settings(None)
    assert result.exit_code == 2
    assert message in result.output
    assert "--scope" in result.output
    assert not (folder / "Ops.pem").exists()
    registry = ClientRegistry(ingress_settings, session_factory)
    registry.load()
    assert registry.get("Ops") is None


def test_cli_clients_lists_the_allowlist_and_names_a_refused_row(
    ingress_settings: Settings, session_factory: sessionmaker[Session]
) -> None:
    # Given a client registered in the database, and a row whose thumbprint was mistyped
    with session_factory.begin() as session:
        session.add(models.Client(client_key="good", client_id="Good", thumbprint="AB" * 20))
        session.add(models.Client(client_key="broken", client_id="Broken", thumbprint="NOT-HEX"))
    set_settings(ingress_settings)
    try:
        result = CliRunner().invoke(certs_command, ["clients"])
    finally:
        set_settings(None)
    # Then the good one is listed, the broken one is named as refused with its reason, and the
    # command fails so a script notices
    assert f"Good\tthumbprint {'AB' * 20}" in result.output
    assert "Broken\tREFUSED:" in result.output
    assert result.exit_code == 1

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

from broker import certs
from broker.clients import ClientRegistry
from broker.errors import ConfigError
from broker.settings import Settings, set_settings


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
    assert "created" in runner.invoke(certs.certs, ["init", "--dir", folder]).output
    assert "kept" in runner.invoke(certs.certs, ["init", "--dir", folder]).output
    assert runner.invoke(certs.certs, ["server", "localhost", "--dir", folder]).exit_code == 0
    client = runner.invoke(certs.certs, ["client", "ClientA", "--dir", folder])
    printed = runner.invoke(certs.certs, ["thumbprint", str(tmp_path / "ClientA.pem")])
    assert client.exit_code == 0
    assert printed.output.strip() == certs.thumbprint(tmp_path / "ClientA.pem")
    assert f"thumbprint {printed.output.strip()}" in client.output


def test_cli_client_register_allowlists_it_with_every_admin_scope_by_default(
    ingress_settings: Settings, session_factory: sessionmaker[Session], tmp_path: Path
) -> None:
    # Given a database and the settings of this process
    set_settings(ingress_settings)
    try:
        runner = CliRunner()
        folder = str(tmp_path / "pki")
        runner.invoke(certs.certs, ["init", "--dir", folder])
        # When a client is issued with --register, and another with explicit scopes
        dev = runner.invoke(certs.certs, ["client", "DevClient", "--dir", folder, "--register"])
        ops = runner.invoke(
            certs.certs,
            [
                "client",
                "Ops",
                "--dir",
                folder,
                "--register",
                "--scopes",
                "read:dead-letters,read:workflow-runtime",
            ],
        )
    finally:
        set_settings(None)
    # Then both are in the allowlist with the expected scopes
    assert dev.exit_code == 0, dev.output
    assert ops.exit_code == 0, ops.output
    registry = ClientRegistry(ingress_settings, session_factory)
    registry.load()
    dev_client, ops_client = registry.get("DevClient"), registry.get("Ops")
    assert dev_client is not None
    assert dev_client.scopes == frozenset(certs.ADMIN_SCOPES)
    assert dev_client.thumbprint == certs.thumbprint(tmp_path / "pki" / "DevClient.pem")
    assert ops_client is not None
    assert ops_client.scopes == frozenset({"read:dead-letters", "read:workflow-runtime"})

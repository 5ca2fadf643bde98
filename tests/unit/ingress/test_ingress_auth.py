"""Certificate checks and the peer-certificate middleware (socket, trusted proxy, spoofing)."""

from __future__ import annotations

import datetime as dt
import urllib.parse
from pathlib import Path
from typing import Any

import pytest
from flask import Flask

from broker.clients import certificates as certs
from broker.clients.entries import ApiClient
from broker.clients.registry import ClientRegistry
from broker.errors import ConfigError, Unauthenticated
from broker.ingress.auth import (
    PEER_CERT,
    PEER_CERT_VERIFIED,
    PeerCertificateMiddleware,
    TrustStore,
    check_certificate,
)
from broker.settings import Settings
from broker.wiring.web import create_public_app
from tests.support.ingress import Pki


class FakeSocket:
    def __init__(self, der: bytes | None) -> None:
        self.der = der

    def getpeercert(self, binary_form: bool = False) -> bytes | None:
        assert binary_form
        return self.der


def run(settings: Settings, environ: dict[str, Any]) -> dict[str, Any]:
    """The environ the app behind the middleware sees."""
    seen: dict[str, Any] = {}

    def app(env: dict[str, Any], start_response: Any) -> list[bytes]:
        seen.update(env)
        return []

    PeerCertificateMiddleware(app, settings)(environ, lambda *args: None)
    return seen


def test_certificate_comes_from_the_gunicorn_socket_and_replaces_anything_else(
    ingress_settings: Settings, pki: Pki
) -> None:
    # Given an environ that already claims some certificate, and the real socket's one
    environ = {"gunicorn.socket": FakeSocket(pki.der("ClientA")), PEER_CERT: pki.der("Admin")}
    # When the middleware runs
    seen = run(ingress_settings, environ)
    # Then the socket's certificate wins and is marked as verified by the handshake
    assert seen[PEER_CERT] == pki.der("ClientA")
    assert seen[PEER_CERT_VERIFIED] is True


def test_header_is_ignored_without_proxy_mode(ingress_settings: Settings, pki: Pki) -> None:
    pem = urllib.parse.quote(pki.pem("Admin").read_text())
    settings = ingress_settings.replace(proxy_cert_header="X-Client-Cert")  # no proxies listed
    seen = run(
        settings,
        {"gunicorn.socket": FakeSocket(None), "REMOTE_ADDR": "10.0.0.5", "HTTP_X_CLIENT_CERT": pem},
    )
    assert PEER_CERT not in seen
    # Proxy mode is off: the middleware leaves the header as it came
    assert seen["HTTP_X_CLIENT_CERT"] == pem


def test_header_from_a_trusted_proxy_is_used_but_not_trusted_as_verified(
    ingress_settings: Settings, pki: Pki
) -> None:
    pem = urllib.parse.quote(pki.pem("Admin").read_text())
    settings = ingress_settings.replace(
        trusted_proxies=("10.0.0.0/24",), proxy_cert_header="X-Client-Cert"
    )
    trusted = run(
        settings,
        {"gunicorn.socket": FakeSocket(None), "REMOTE_ADDR": "10.0.0.5", "HTTP_X_CLIENT_CERT": pem},
    )
    stranger = run(
        settings,
        {
            "gunicorn.socket": FakeSocket(None),
            "REMOTE_ADDR": "192.168.1.9",
            "HTTP_X_CLIENT_CERT": pem,
        },
    )
    assert trusted[PEER_CERT] == pki.der("Admin")
    assert trusted[PEER_CERT_VERIFIED] is False
    assert PEER_CERT not in stranger
    assert "HTTP_X_CLIENT_CERT" not in stranger


def test_a_trusted_proxy_network_written_with_host_bits_is_that_network(
    ingress_settings: Settings, pki: Pki
) -> None:
    # Given a trusted proxy network written from one of its addresses (10.0.0.7/24, not
    # 10.0.0.0/24)
    pem = urllib.parse.quote(pki.pem("Admin").read_text())
    settings = ingress_settings.replace(
        trusted_proxies=("10.0.0.7/24",), proxy_cert_header="X-Client-Cert"
    )
    # Then it is accepted as the network, and another address of it is a trusted proxy
    seen = run(
        settings,
        {"gunicorn.socket": FakeSocket(None), "REMOTE_ADDR": "10.0.0.5", "HTTP_X_CLIENT_CERT": pem},
    )
    assert seen[PEER_CERT] == pki.der("Admin")


def test_a_proxy_header_without_a_peer_address_or_with_garbage_is_no_certificate(
    ingress_settings: Settings, pki: Pki
) -> None:
    pem = urllib.parse.quote(pki.pem("Admin").read_text())
    settings = ingress_settings.replace(
        trusted_proxies=("0.0.0.0/0",), proxy_cert_header="X-Client-Cert"
    )
    # A connection whose peer address is unknown is no trusted proxy, even when all are trusted
    unknown = run(settings, {"gunicorn.socket": FakeSocket(None), "HTTP_X_CLIENT_CERT": pem})
    assert PEER_CERT not in unknown
    # A trusted proxy's unreadable header is no certificate at all (answered 401 as missing)
    garbage = run(
        settings,
        {
            "gunicorn.socket": FakeSocket(None),
            "REMOTE_ADDR": "10.0.0.5",
            "HTTP_X_CLIENT_CERT": "not-a-certificate",
        },
    )
    assert garbage[PEER_CERT] == b""


def test_proxy_passed_certificate_of_another_ca_is_401(
    ingress_settings: Settings, session_factory: Any, pki: Pki
) -> None:
    # Given proxy mode, and an allowlisted thumbprint on a certificate of another CA
    settings = ingress_settings.replace(
        trusted_proxies=("127.0.0.1",), proxy_cert_header="X-Client-Cert"
    )
    app: Flask = create_public_app(settings, session_factory=session_factory)
    client = app.test_client()
    headers = {"X-Client-Cert": urllib.parse.quote(pki.pem("Rogue").read_text())}
    good = {"X-Client-Cert": urllib.parse.quote(pki.pem("ClientA").read_text())}
    # When the proxy passes it, then the chain check refuses it; our CA's certificate passes
    rogue = client.get(
        "/requests", headers=headers, environ_base={"gunicorn.socket": FakeSocket(None)}
    )
    ok = client.get("/requests", headers=good, environ_base={"gunicorn.socket": FakeSocket(None)})
    assert rogue.status_code == 401
    assert rogue.get_json()["error"] == "Client certificate is not issued by a trusted CA"
    assert ok.status_code == 200


def test_expired_and_not_yet_valid_certificates_are_refused(pki: Pki) -> None:
    store = TrustStore(str(pki.ca))
    with pytest.raises(Unauthenticated) as expired:
        check_certificate(pki.der("Expired"), verified=True, store=store)
    assert expired.value.message == "Client certificate has expired"
    early = dt.datetime.now(dt.UTC) - dt.timedelta(days=3650)
    with pytest.raises(Unauthenticated) as too_early:
        check_certificate(pki.der("ClientA"), verified=True, store=store, now=early)
    assert too_early.value.message == "Client certificate is not yet valid"


def test_chain_is_checked_unless_the_handshake_did_it(pki: Pki) -> None:
    store = TrustStore(str(pki.ca))
    with pytest.raises(Unauthenticated, match="trusted CA"):
        check_certificate(pki.der("Rogue"), verified=False, store=store)
    assert check_certificate(pki.der("ClientA"), verified=False, store=store)


def test_missing_ca_file_refuses_every_unverified_certificate(pki: Pki, tmp_path: Path) -> None:
    store = TrustStore(str(tmp_path / "missing.pem"))
    with pytest.raises(Unauthenticated):
        check_certificate(pki.der("ClientA"), verified=False, store=store)


def test_garbage_certificate_is_401(pki: Pki) -> None:
    with pytest.raises(Unauthenticated) as unreadable:
        check_certificate(b"not a certificate", verified=True, store=TrustStore(str(pki.ca)))
    assert unreadable.value.message == "Client certificate is unreadable"


def test_no_certificate_is_401_saying_one_is_required(pki: Pki) -> None:
    for nothing in (None, b""):
        with pytest.raises(Unauthenticated) as missing:
            check_certificate(nothing, verified=True, store=TrustStore(str(pki.ca)))
        assert missing.value.message == "Client certificate required"


def test_a_ca_bundle_is_searched_past_other_cas_and_a_namesake_with_another_key(
    pki: Pki, tmp_path: Path
) -> None:
    # Given a CA file that lists another CA, then a CA of the same name with another key, and
    # only then the CA that issued the client certificates
    namesake = certs.init_ca(tmp_path / "namesake")
    bundle = tmp_path / "bundle.pem"
    bundle.write_bytes(
        (pki.folder / "other" / "ca.pem").read_bytes() + namesake.read_bytes() + pki.ca.read_bytes()
    )
    store = TrustStore(str(bundle))
    assert len(store.cas()) == 3
    # Then a certificate of the last CA is accepted without the handshake's verification
    assert check_certificate(pki.der("ClientA"), verified=False, store=store)
    # And one of no listed CA is still refused
    alone = tmp_path / "alone"
    certs.init_ca(alone, common_name="Unlisted CA")
    certs.issue_client(alone, "Stray")
    stray = Pki(alone).der("Stray")
    with pytest.raises(Unauthenticated, match="trusted CA"):
        check_certificate(stray, verified=False, store=store)


def test_invalid_trusted_proxy_is_a_config_error(ingress_settings: Settings) -> None:
    settings = ingress_settings.replace(
        trusted_proxies=("not-an-address",), proxy_cert_header="X-Client-Cert"
    )
    with pytest.raises(ConfigError, match="BROKER_TRUSTED_PROXIES"):
        PeerCertificateMiddleware(lambda environ, start_response: [], settings)


def test_a_certificate_the_handshake_verified_is_not_checked_again_against_the_ca_file(
    ingress_settings: Settings, session_factory: Any, tmp_path: Path
) -> None:
    # Given an allowlisted client whose certificate was issued by a CA the client CA file does not
    # list (as when the client sends an intermediate and the handshake builds the chain to the
    # root the file holds)
    issuing = tmp_path / "issuing"
    certs.init_ca(issuing, common_name="Partner Issuing CA")
    certs.issue_client(issuing, "Partner")
    partner = Pki(issuing)
    pem = partner.pem("Partner")
    ClientRegistry(ingress_settings, session_factory).register_client(
        ApiClient("Partner", certs.thumbprint(pem), None, "via an intermediate", frozenset())
    )
    app: Flask = create_public_app(ingress_settings, session_factory=session_factory)
    client = app.test_client()
    # When the connection's own handshake presents it, then it identifies the client
    verified = {"gunicorn.socket": FakeSocket(partner.der("Partner"))}
    assert client.get("/requests", environ_base=verified).status_code == 200
    # And the same certificate without the handshake's word is checked against the file: refused
    unverified = {PEER_CERT: partner.der("Partner")}
    refused = client.get("/requests", environ_base=unverified)
    assert refused.status_code == 401
    assert refused.get_json()["error"] == "Client certificate is not issued by a trusted CA"


def test_a_connection_without_a_certificate_leaves_none_and_nothing_verified(
    ingress_settings: Settings, pki: Pki
) -> None:
    # Given an environ that already claims a verified certificate, on a TLS connection whose
    # peer sent none, and on a plain socket that cannot have one
    for sock in (FakeSocket(None), object()):
        environ = {"gunicorn.socket": sock, PEER_CERT: pki.der("Admin"), PEER_CERT_VERIFIED: True}
        # When the middleware runs
        seen = run(ingress_settings, environ)
        # Then no certificate is left, and nothing is marked verified by a handshake
        assert PEER_CERT not in seen
        assert seen[PEER_CERT_VERIFIED] is False


def test_a_trusted_proxy_request_without_the_certificate_header_has_no_certificate(
    ingress_settings: Settings,
) -> None:
    settings = ingress_settings.replace(
        trusted_proxies=("10.0.0.0/24",), proxy_cert_header="X-Client-Cert"
    )
    seen = run(settings, {"gunicorn.socket": FakeSocket(None), "REMOTE_ADDR": "10.0.0.5"})
    assert PEER_CERT not in seen
    assert seen[PEER_CERT_VERIFIED] is False


def test_a_certificate_is_valid_from_the_first_moment_of_its_window_to_the_last(pki: Pki) -> None:
    store = TrustStore(str(pki.ca))
    cert = certs.load_certificate(pki.der("ClientA"))
    for moment in (cert.not_valid_before_utc, cert.not_valid_after_utc):
        assert check_certificate(pki.der("ClientA"), verified=True, store=store, now=moment)

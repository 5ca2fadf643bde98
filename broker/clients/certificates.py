"""Certificate tooling for development and tests: a development CA, the server certificate and
client certificates; an operator's own PKI is checked and used as given."""

from __future__ import annotations

import datetime as dt
import ipaddress
import logging
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.asymmetric.types import CertificateIssuerPrivateKeyTypes
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from broker.errors import ConfigError
from broker.setting_keys import KEY_BY_ENV
from broker.settings import Settings

if TYPE_CHECKING:
    from broker.clients.registry import ClientRegistry

logger = logging.getLogger(__name__)

CA_DAYS = 3650
LEAF_DAYS = 825
_CLIENT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


# Fingerprints -------------------------------------------------------------------------------------


def load_certificate(data: bytes) -> x509.Certificate:
    """A certificate from PEM or DER bytes."""
    if data.lstrip().startswith(b"-----BEGIN"):
        return x509.load_pem_x509_certificate(data)
    return x509.load_der_x509_certificate(data)


def thumbprint_of(cert: x509.Certificate) -> str:
    """SHA-1 of the DER encoding, uppercase hex without colons (elsa-broker's thumbprint)."""
    return cert.fingerprint(hashes.SHA1()).hex().upper()  # noqa: S303 - an identifier, not a MAC


def fingerprint_sha256_of(cert: x509.Certificate) -> str:
    """SHA-256 of the DER encoding, uppercase hex without colons."""
    return cert.fingerprint(hashes.SHA256()).hex().upper()


def thumbprint(pem_path: str | Path) -> str:
    """The SHA-1 thumbprint of the certificate in ``pem_path``."""
    return thumbprint_of(load_certificate(Path(pem_path).read_bytes()))


def fingerprint_sha256(pem_path: str | Path) -> str:
    """The SHA-256 fingerprint of the certificate in ``pem_path``."""
    return fingerprint_sha256_of(load_certificate(Path(pem_path).read_bytes()))


# Issuing ------------------------------------------------------------------------------------------


def init_ca(folder: str | Path, *, force: bool = False, common_name: str = "Broker Dev CA") -> Path:
    """Create ``ca.pem``/``ca.key`` in ``folder``; an existing CA is kept unless ``force``."""
    folder = Path(folder)
    cert_path, key_path = folder / "ca.pem", folder / "ca.key"
    if cert_path.exists() and key_path.exists() and not force:
        logger.info("CA %s exists; kept", cert_path)
        return cert_path
    key = _new_key()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = _now()
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=CA_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    _write(folder, "ca", cert, key)
    logger.info("created CA %s", cert_path)
    return cert_path


def issue_server(folder: str | Path, host: str, *, days: int = LEAF_DAYS) -> Path:
    """Create ``server.pem``/``server.key`` signed by the folder's CA, for ``host`` and loopback."""
    names: list[str] = []
    for candidate in (host, "localhost", "127.0.0.1", "::1"):
        if candidate and candidate not in names:
            names.append(candidate)
    san = x509.SubjectAlternativeName([_general_name(n) for n in names])
    cert_path = _issue(
        Path(folder),
        "server",
        host,
        san,
        ExtendedKeyUsageOID.SERVER_AUTH,
        not_before=None,
        not_after=None,
        days=days,
    )
    logger.info("issued server certificate %s for %s", cert_path, ", ".join(names))
    return cert_path


def issue_client(
    folder: str | Path,
    client_id: str,
    *,
    days: int = LEAF_DAYS,
    not_before: dt.datetime | None = None,
    not_after: dt.datetime | None = None,
) -> Path:
    """Create ``<client_id>.pem``/``.key`` signed by the folder's CA (``not_*`` for tests)."""
    if not _CLIENT_ID.match(client_id) or client_id in {"ca", "server"}:
        raise ConfigError(f"client id {client_id!r} cannot name a certificate file")
    cert_path = _issue(
        Path(folder),
        client_id,
        client_id,
        None,
        ExtendedKeyUsageOID.CLIENT_AUTH,
        not_before=not_before,
        not_after=not_after,
        days=days,
    )
    logger.info("issued client certificate %s (thumbprint %s)", cert_path, thumbprint(cert_path))
    return cert_path


def register_dev_client(
    clients: ClientRegistry,
    pem_path: str | Path,
    client_id: str,
    *,
    scopes: Iterable[str] = (),
    description: str = "development client",
) -> None:
    """Allowlist the certificate in ``pem_path`` as ``client_id`` in the database, with exactly
    ``scopes`` (none unless named: least privilege)."""
    from broker.clients.entries import ApiClient

    clients.register_client(
        ApiClient(
            client_id=client_id,
            thumbprint=thumbprint(pem_path),
            fingerprint_sha256=fingerprint_sha256(pem_path),
            description=description,
            scopes=frozenset(scopes),
        )
    )


def _issue(
    folder: Path,
    stem: str,
    common_name: str,
    san: x509.SubjectAlternativeName | None,
    usage: x509.ObjectIdentifier,
    *,
    not_before: dt.datetime | None,
    not_after: dt.datetime | None,
    days: int,
) -> Path:
    ca_cert, ca_key = _load_ca(folder)
    key = _new_key()
    now = _now()
    start = not_before or now - dt.timedelta(minutes=5)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(not_after or now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=True,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
    )
    if san is not None:
        builder = builder.add_extension(san, critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    _write(folder, stem, cert, key)
    return folder / f"{stem}.pem"


def _load_ca(folder: Path) -> tuple[x509.Certificate, CertificateIssuerPrivateKeyTypes]:
    cert_path, key_path = folder / "ca.pem", folder / "ca.key"
    if not (cert_path.exists() and key_path.exists()):
        raise ConfigError(
            f"no CA with its private key in {folder} (ca.pem and ca.key); run `broker certs "
            "init` for a development CA, or issue the certificate with your own CA"
        )
    key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
    if not isinstance(key, rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey):
        raise ConfigError(f"{key_path} is neither an RSA nor an EC key")
    return x509.load_pem_x509_certificate(cert_path.read_bytes()), key


# The operator's PKI or the development one -------------------------------------------------------

DEV_FILES = {"tls_client_ca": "ca.pem", "tls_cert": "server.pem", "tls_key": "server.key"}


def development_folder(settings: Settings) -> Path | None:
    """The broker's own development certificate folder, when the three TLS settings name its
    files (``ca.pem``, ``server.pem``, ``server.key`` in ``var/certs`` or in ``certs`` under
    ``BROKER_VAR_DIR``); None when they name an operator's PKI."""
    folder = Path(settings.tls_client_ca).parent
    own = {
        Path(KEY_BY_ENV["BROKER_TLS_CLIENT_CA"].default).parent.resolve(),
        (settings.var_path / "certs").resolve(),
    }
    if folder.resolve() not in own:
        return None
    for attr, name in DEV_FILES.items():
        if Path(getattr(settings, attr)).resolve() != (folder / name).resolve():
            return None
    return folder


def check_pki(settings: Settings) -> None:
    """Check the configured TLS files as ``broker run`` gets them: each exists and parses (an RSA
    or EC key matching the server certificate, a CA bundle); ``ConfigError`` names the setting.
    Nothing is created: the CA's private key is not needed (nor expected) here."""
    cert = _read_certificates(settings.tls_cert, "BROKER_TLS_CERT")[0]
    _read_certificates(settings.tls_client_ca, "BROKER_TLS_CLIENT_CA")
    try:
        key = serialization.load_pem_private_key(_read(settings.tls_key, "BROKER_TLS_KEY"), None)
    except (ValueError, TypeError) as exc:
        raise ConfigError(
            f"BROKER_TLS_KEY={settings.tls_key} is not an unencrypted PEM private key: {exc}"
        ) from exc
    if not isinstance(key, rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey):
        raise ConfigError(f"BROKER_TLS_KEY={settings.tls_key} is neither an RSA nor an EC key")
    spki = (serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    if key.public_key().public_bytes(*spki) != cert.public_key().public_bytes(*spki):
        raise ConfigError(
            f"BROKER_TLS_KEY={settings.tls_key} does not match the certificate of "
            f"BROKER_TLS_CERT={settings.tls_cert}"
        )


def _read(path: str, setting: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"{setting}={path} cannot be read: {exc.strerror}") from exc


def _read_certificates(path: str, setting: str) -> list[x509.Certificate]:
    try:
        found = x509.load_pem_x509_certificates(_read(path, setting))
    except ValueError as exc:
        raise ConfigError(f"{setting}={path} holds no PEM certificate: {exc}") from exc
    return found


def _new_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(microsecond=0)


def _general_name(name: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        return x509.DNSName(name)


def _write(folder: Path, stem: str, cert: x509.Certificate, key: rsa.RSAPrivateKey) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    key_bytes = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    key_path = folder / f"{stem}.key"
    # Created 0600 from the start (and fixed if the file existed), so the key is never readable.
    fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(key_bytes)
    (folder / f"{stem}.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))

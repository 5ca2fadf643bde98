"""Shared by the ingress tests: a generated PKI, allowlist files, workflows, and app builders.

The PKI holds one CA with a server certificate and these clients:
``ClientA`` (InvoiceProcess, OpenType), ``ClientB`` (OtherType), ``Admin`` (every admin scope),
``Stranger`` (valid chain, not allowlisted), ``Expired`` (allowlisted, expired) and ``Rogue``
(allowlisted, but issued by another CA).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import inspect
import ipaddress
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from broker.clients import certificates as certs
from broker.clients.scopes import ADMIN_SCOPES
from broker.runtime.steps import callbacks
from broker.settings import Settings
from broker.store.models import Request
from tests.support.cache import built_once
from tests.support.services import PROJECT_ROOT

INVOICE_KEYS = {"InvoiceNumber": "INV-1", "VendorCode": "V-9"}
ALLOWLISTED = ("ClientA", "ClientB", "Admin", "Expired", "Rogue")


@dataclasses.dataclass(frozen=True)
class Pki:
    folder: Path

    def pem(self, name: str) -> Path:
        if name == "Rogue":
            return self.folder / "other" / "Rogue.pem"
        return self.folder / f"{name}.pem"

    def key(self, name: str) -> Path:
        return self.pem(name).with_suffix(".key")

    def der(self, name: str) -> bytes:
        cert = x509.load_pem_x509_certificate(self.pem(name).read_bytes())
        return cert.public_bytes(Encoding.DER)

    @property
    def ca(self) -> Path:
        return self.folder / "ca.pem"


def make_pki(folder: Path) -> Pki:
    """The suite's PKI in ``folder``: a copy of the one this hour's first test process generated
    (ten RSA keys cost about a second, and every test process, a mutant's among them, would pay
    it again)."""
    hour = int(time.time() // 3600)
    name = f"broker-test-pki-{os.getuid()}-{_pki_version()}"
    cache = built_once(Path(tempfile.gettempdir()) / f"{name}-{hour}", _generate_pki)
    for old in cache.parent.glob(f"{name}-*"):
        if old.stat().st_mtime < time.time() - 7200:  # an earlier hour's
            shutil.rmtree(old, ignore_errors=True)
    shutil.copytree(cache, folder, dirs_exist_ok=True)
    return Pki(folder)


def _pki_version() -> str:
    """A digest of what the PKI is made by: a changed issuer makes a new one."""
    source = Path(certs.__file__).read_bytes() + inspect.getsource(_generate_pki).encode()
    return hashlib.sha256(source).hexdigest()[:12]


def _generate_pki(folder: Path) -> None:
    certs.init_ca(folder)
    certs.issue_server(folder, "localhost")
    for name in ("ClientA", "ClientB", "Admin", "Stranger"):
        certs.issue_client(folder, name)
    now = dt.datetime.now(dt.UTC)
    certs.issue_client(
        folder,
        "Expired",
        not_before=now - dt.timedelta(days=10),
        not_after=now - dt.timedelta(days=1),
    )
    certs.init_ca(folder / "other", common_name="Rogue CA")
    certs.issue_client(folder / "other", "Rogue")


def write_config(folder: Path, pki: Pki) -> dict[str, str]:
    """Allowlist, request-type rules and workflows under ``folder``; answers their env keys."""
    folder.mkdir(parents=True, exist_ok=True)
    clients: list[dict[str, Any]] = []
    for name in ALLOWLISTED:
        scopes = list(ADMIN_SCOPES) if name == "Admin" else []
        clients.append(
            {
                "clientId": name,
                "thumbprint": certs.thumbprint(pki.pem(name)),
                "description": f"test client {name}",
                "scopes": scopes,
            }
        )
    rules = [
        {
            "clientId": "ClientA",
            "requestType": "InvoiceProcess",
            "requiredKeys": ["InvoiceNumber", "VendorCode"],
            "allowAdditionalKeys": False,
        },
        {
            "clientId": "ClientA",
            "requestType": "OpenType",
            "requiredKeys": [],
            "allowAdditionalKeys": True,
        },
        {
            "clientId": "ClientB",
            "requestType": "OtherType",
            "requiredKeys": ["Ref"],
            "allowAdditionalKeys": False,
        },
        {
            "clientId": "Admin",
            "requestType": "OpenType",
            "requiredKeys": [],
            "allowAdditionalKeys": True,
        },
        {
            "clientId": "Expired",
            "requestType": "OpenType",
            "requiredKeys": [],
            "allowAdditionalKeys": True,
        },
        {
            "clientId": "Rogue",
            "requestType": "OpenType",
            "requiredKeys": [],
            "allowAdditionalKeys": True,
        },
    ]
    (folder / "clients.json").write_text(json.dumps({"clients": clients}))
    (folder / "requestTypes.json").write_text(json.dumps({"requestTypes": rules}))
    workflows = folder / "workflows"
    workflows.mkdir(exist_ok=True)
    template = json.loads(
        (PROJECT_ROOT / "tests" / "fixtures" / "registry" / "invoice.json").read_text()
    )
    for definition_id, request_type in (
        ("invoice-process", "InvoiceProcess"),
        ("open-type", "OpenType"),
        ("other-type", "OtherType"),
    ):
        document = {
            **template,
            "id": f"{definition_id}-v1",
            "definitionId": definition_id,
            "customProperties": {"requestType": request_type},
        }
        (workflows / f"{definition_id}.json").write_text(json.dumps(document))
    return {
        "BROKER_CLIENTS_FILE": str(folder / "clients.json"),
        "BROKER_REQUEST_TYPES_FILE": str(folder / "requestTypes.json"),
        "BROKER_WORKFLOW_PATHS": str(workflows),
    }


def environment(var_dir: Path, pki: Pki, config: dict[str, str], **extra: str) -> dict[str, str]:
    """Every BROKER_* key a listener of the tests needs."""
    return {
        "BROKER_VAR_DIR": str(var_dir),
        "BROKER_DATABASE_URL": f"sqlite:///{var_dir / 'broker.db'}",
        "BROKER_QUEUE_URL": "filesystem://",
        "BROKER_LOCK_URL": f"file://{var_dir / 'locks'}",
        "BROKER_FILE_STORAGE_URL": f"file://{var_dir / 'files'}",
        "BROKER_TLS_CERT": str(pki.folder / "server.pem"),
        "BROKER_TLS_KEY": str(pki.folder / "server.key"),
        "BROKER_TLS_CLIENT_CA": str(pki.ca),
        "BROKER_WATCH_WORKFLOWS": "false",
        "BROKER_CALLBACK_SECRET": "s3cret-callback",
        "BROKER_LOG_FORMAT": "text",
        **config,
        **extra,
    }


def settings_for(var_dir: Path, pki: Pki, config: dict[str, str], **extra: str) -> Settings:
    return Settings.from_env(environment(var_dir, pki, config, **extra))


def signed_callback(
    secret: str,
    request_id: str,
    attempt: int,
    document: Any,
    *,
    msg_id: str | None = None,
    timestamp: dt.datetime | None = None,
) -> tuple[bytes, dict[str, str]]:
    """A callback body and its headers, signed as the remote executor of ``request_id``'s dispatch
    ``attempt`` signs it (with the token the broker minted under ``secret``)."""
    body = json.dumps(document).encode()
    token = callbacks.token_for(secret, request_id, attempt)
    signed = callbacks.sign(token, body, msg_id=msg_id, timestamp=timestamp)
    return body, {"Content-Type": "application/json", **signed}


def mark_dispatched(database_url: str, request_id: str) -> int:
    """Record one more remote dispatch of ``request_id``, as ``runtime.remote`` does before it
    POSTs (tests without a worker stand in for it); answers the attempt."""
    engine = sa.create_engine(database_url)
    try:
        with engine.begin() as conn:
            table = Request.__table__
            conn.execute(
                sa.update(table)
                .where(table.c.id == request_id)
                .values(remote_attempt=sa.func.coalesce(table.c.remote_attempt, 0) + 1)
            )
            attempt = conn.scalar(sa.select(table.c.remote_attempt).where(table.c.id == request_id))
    finally:
        engine.dispose()
    if attempt is None:
        raise LookupError(f"request {request_id} not found")
    return int(attempt)


@dataclasses.dataclass(frozen=True)
class OperatorPki:
    """An operator's own PKI: ``folder`` holds only ``ca.pem``, ``server.pem`` and ``server.key``
    (the CA's private key is kept in ``private``, as in any real deployment); the client ``Ops``
    was issued by that CA (``private/Ops.pem``)."""

    folder: Path
    private: Path

    @property
    def client(self) -> tuple[Path, Path]:
        return self.private / "Ops.pem", self.private / "Ops.key"

    def environment(self) -> dict[str, str]:
        return {
            "BROKER_TLS_CERT": str(self.folder / "server.pem"),
            "BROKER_TLS_KEY": str(self.folder / "server.key"),
            "BROKER_TLS_CLIENT_CA": str(self.folder / "ca.pem"),
        }


def make_operator_pki(root: Path, kind: str) -> OperatorPki:
    """An operator PKI whose CA (and server key) is ``rsa`` or ``ec`` (P-256)."""
    private, folder = root / "ca-private", root / "pki"
    private.mkdir(parents=True)
    folder.mkdir(parents=True)
    if kind == "rsa":
        certs.init_ca(private, common_name="Operator RSA CA")
        certs.issue_server(private, "localhost")
    else:
        _ec_ca_and_server(private)
    certs.issue_client(private, "Ops")  # an RSA leaf signed by the operator's CA
    for name in ("ca.pem", "server.pem", "server.key"):
        (folder / name).write_bytes((private / name).read_bytes())
    (folder / "server.key").chmod(0o600)
    return OperatorPki(folder, private)


def _ec_ca_and_server(folder: Path) -> None:
    now = dt.datetime.now(dt.UTC)

    def name(common: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])

    def save(stem: str, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> None:
        (folder / f"{stem}.pem").write_bytes(cert.public_bytes(Encoding.PEM))
        pem = key.private_bytes(Encoding.PEM, PrivateFormat.TraditionalOpenSSL, NoEncryption())
        (folder / f"{stem}.key").write_bytes(pem)
        (folder / f"{stem}.key").chmod(0o600)

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(name("Operator EC CA"))
        .issuer_name(name("Operator EC CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    save("ca", ca, ca_key)
    key = ec.generate_private_key(ec.SECP256R1())
    server = (
        x509.CertificateBuilder()
        .subject_name(name("localhost"))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=30))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    save("server", server, key)

"""A rotated server certificate is served without a restart or a signal.

Kubernetes updates a mounted Secret by writing the new files into a fresh folder and swapping the
``..data`` symlink the file names point through; the public listener (gunicorn's gthread worker
builds the TLS context for each connection it accepts) must present the new certificate on the
next connection. The same holds for a file replaced in place (systemd, compose bind mounts).
"""

from __future__ import annotations

import os
import shutil
import socket
import ssl
from pathlib import Path

import pytest
from cryptography import x509

from broker.clients import certificates as certs
from broker.store import db
from tests.support.ingress import make_pki, write_config
from tests.support.runtime import runtime_env
from tests.support.services import free_port
from tests.support.stack import roles
from tests.support.stack.config import Ports
from tests.support.stack.roster import Stack
from tests.support.waits import wait_until

pytestmark = pytest.mark.slow

FILES = ("server.pem", "server.key", "ca.pem")


def mount(pki: Path, mounted: Path, version: str) -> None:
    """Lay the PKI's current server files out as the kubelet does: a versioned folder, ``..data``
    pointing at it (swapped atomically), and each name a symlink through ``..data``."""
    folder = mounted / f"..{version}"
    folder.mkdir(parents=True)
    for name in FILES:
        shutil.copy(pki / name, folder / name)
    staging = mounted / "..data_tmp"
    staging.symlink_to(folder.name)
    os.replace(staging, mounted / "..data")
    for name in FILES:
        if not (mounted / name).is_symlink():
            (mounted / name).symlink_to(Path("..data") / name)


def served_serial(port: int, pki: Path) -> int:
    context = ssl.create_default_context(cafile=str(pki / "ca.pem"))
    context.load_cert_chain(pki / "ClientA.pem", pki / "ClientA.key")
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname="localhost") as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


def test_the_public_listener_serves_a_rotated_certificate_on_the_next_connection(
    tmp_path: Path,
) -> None:
    pki_dir, mounted = tmp_path / "pki", tmp_path / "tls"
    pki = make_pki(pki_dir)
    config = write_config(tmp_path / "config", pki)
    mount(pki_dir, mounted, "v1")
    first = x509.load_pem_x509_certificate((pki_dir / "server.pem").read_bytes()).serial_number
    port = free_port()
    broker_env = runtime_env(
        tmp_path / "var",
        database_url=f"sqlite:///{tmp_path / 'broker.db'}",
        workflows=tmp_path / "config" / "workflows",
        BROKER_CLIENTS_FILE=config["BROKER_CLIENTS_FILE"],
        BROKER_TLS_CERT=str(mounted / "server.pem"),
        BROKER_TLS_KEY=str(mounted / "server.key"),
        BROKER_TLS_CLIENT_CA=str(mounted / "ca.pem"),
        BROKER_PUBLIC_BIND=f"127.0.0.1:{port}",
    )
    (tmp_path / "var").mkdir()
    db.upgrade(broker_env["BROKER_DATABASE_URL"])
    db.dispose_engines()
    stack = Stack(tmp_path, broker_env, ports=Ports(public=port))
    try:
        listener = stack.start("public", roles.listener("public", workers=1, threads=4))
        stack.wait_listening()
        # Given the listener serving the first certificate
        assert served_serial(port, pki_dir) == first
        # When the Secret is updated with a new certificate (same CA), as the kubelet does it
        certs.issue_server(pki_dir, "localhost")
        second = x509.load_pem_x509_certificate((pki_dir / "server.pem").read_bytes())
        assert second.serial_number != first
        mount(pki_dir, mounted, "v2")
        # Then the next connection gets the new one, with no restart and no signal
        wait_until(
            lambda: served_serial(port, pki_dir) == second.serial_number,
            timeout=10,
            what="the rotated certificate",
        )
        assert listener.running
    finally:
        stack.close()

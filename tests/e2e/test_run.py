"""`broker run` (what `make run` calls): every role starts, /healthz answers, Ctrl-C stops all."""

from __future__ import annotations

import http.client
import json
import os
import signal
import ssl
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import sqlalchemy as sa

from broker.clients import certificates as certs
from broker.store.models import Client
from tests.support.ingress import make_operator_pki
from tests.support.services import PROJECT_ROOT, free_port

pytestmark = pytest.mark.slow


def _group_members(pgid: int) -> list[int]:
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # the fields after the command name: state ppid pgrp ...
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[2]) == pgid:
            members.append(int(entry.name))
    return members


def _wait_for(url: str, deadline: float) -> bytes:
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                return bytes(response.read())
        except OSError as exc:
            last = exc
            time.sleep(0.3)
    raise AssertionError(f"{url} never answered: {last}")


def _environment(var: Path, **extra: str) -> dict[str, str]:
    """A configuration rooted in ``var``, on free loopback ports."""
    return {
        **os.environ,  # noqa: TID251 - the child needs PATH and friends
        "BROKER_VAR_DIR": str(var),
        "BROKER_DATABASE_URL": f"sqlite:///{var / 'broker.db'}",
        "BROKER_LOCK_URL": f"file://{var / 'locks'}",
        "BROKER_PUBLIC_BIND": f"127.0.0.1:{free_port()}",
        "BROKER_INTERNAL_BIND": f"127.0.0.1:{free_port()}",
        "BROKER_CONSOLE_BIND": f"127.0.0.1:{free_port()}",
        "BROKER_TLS_CERT": str(var / "certs" / "server.pem"),
        "BROKER_TLS_KEY": str(var / "certs" / "server.key"),
        "BROKER_TLS_CLIENT_CA": str(var / "certs" / "ca.pem"),
        "BROKER_SMTP_URL": f"file://{var / 'mail'}",
        "BROKER_WORKER_CONCURRENCY": "1",
        **extra,
    }


def _start(env: dict[str, str], stderr: Path) -> subprocess.Popen[bytes]:
    """``broker run`` in its own session; its log goes to a file, not a pipe: five roles' logs
    would fill a pipe nobody reads and stall them."""
    broker = Path(sys.executable).parent / "broker"
    return subprocess.Popen(
        [str(broker), "run"],
        cwd=PROJECT_ROOT,
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=stderr.open("wb"),
    )


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Ctrl-C to the whole foreground group; asserts that nothing of it is left running."""
    try:
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=40)
        deadline = time.monotonic() + 10
        while _group_members(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _group_members(proc.pid) == []
    finally:
        if proc.poll() is None or _group_members(proc.pid):
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


def test_run_serves_healthz_and_ctrl_c_leaves_no_process(tmp_path: Path) -> None:
    # Given a configuration rooted in a temporary folder, on free loopback ports
    var = tmp_path / "var"
    env = _environment(var)
    internal, console = env["BROKER_INTERNAL_BIND"], env["BROKER_CONSOLE_BIND"]
    proc = _start(env, stderr=tmp_path / "run.log")
    try:
        # When it has started
        body = _wait_for(f"http://{internal}/healthz", time.monotonic() + 90)
        # Then the internal listener answers, and the dev certificates exist
        assert b"ok" in body
        for name in ("ca.pem", "server.pem", "server.key", "DevClient.pem", "DevClient.key"):
            assert (var / "certs" / name).exists(), name
        # And the console listener answers, with a development key kept in var/ only
        assert b"ok" in _wait_for(f"http://{console}/healthz", time.monotonic() + 60)
        key = (var / "console-dev-key").read_text().strip()
        assert key.startswith("bk_")
        assert oct((var / "console-dev-key").stat().st_mode & 0o777) == "0o600"
        # And the console's URL was printed, and where its key is, never the key itself
        printed = (tmp_path / "run.log").read_text(errors="replace")
        assert f"http://{console}/sign-in" in printed
        assert key not in printed
        # When Ctrl-C reaches the whole foreground group
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=40)
        # Then nothing of the group is left running
        deadline = time.monotonic() + 10
        while _group_members(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _group_members(proc.pid) == []
    finally:
        if proc.poll() is None or _group_members(proc.pid):
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


@pytest.mark.parametrize("kind", ["rsa", "ec"])
def test_run_on_an_operator_pki_serves_mtls_and_registers_no_client(
    tmp_path: Path, kind: str
) -> None:
    # Given an operator's PKI (the CA's private key kept elsewhere) and a client it issued,
    # allowlisted in the operator's clients.json without any scope
    pki = make_operator_pki(tmp_path / "operator", kind)
    ops_pem, ops_key = pki.client
    config = tmp_path / "config"
    config.mkdir()
    (config / "clients.json").write_text(
        json.dumps({"clients": [{"clientId": "Ops", "thumbprint": certs.thumbprint(ops_pem)}]})
    )
    rule = {"clientId": "Ops", "requestType": "InvoiceProcess", "requiredKeys": []}
    (config / "requestTypes.json").write_text(json.dumps({"requestTypes": [rule]}))
    var = tmp_path / "var"
    env = _environment(
        var,
        BROKER_CLIENTS_FILE=str(config / "clients.json"),
        BROKER_REQUEST_TYPES_FILE=str(config / "requestTypes.json"),
        **pki.environment(),
    )
    before = {p.name: p.read_bytes() for p in pki.folder.iterdir()}
    log = tmp_path / "run.log"
    # When broker run starts on it
    proc = _start(env, stderr=log)
    try:
        deadline = time.monotonic() + 90
        try:
            _wait_for(f"http://{env['BROKER_INTERNAL_BIND']}/healthz", deadline)
        except AssertionError:
            raise AssertionError(log.read_text()) from None
        # Then the public listener serves the operator's client over mutual TLS
        context = ssl.create_default_context(cafile=str(pki.folder / "ca.pem"))
        context.load_cert_chain(ops_pem, ops_key)
        port = int(env["BROKER_PUBLIC_BIND"].rsplit(":", 1)[1])
        types = _mtls_get(context, port, "/request-types", deadline)
        admin = _mtls_get(context, port, "/admin/workflow-runtime/status", deadline)
    finally:
        _stop(proc)
    assert types[0] == 200, types
    assert [t["requestType"] for t in json.loads(types[1])["requestTypes"]] == ["InvoiceProcess"]
    assert admin[0] == 403  # the operator granted Ops no admin scope
    # And broker run registered no client of its own, and wrote nothing into the operator's
    # folder nor a development PKI anywhere
    engine = sa.create_engine(env["BROKER_DATABASE_URL"])
    try:
        with engine.connect() as conn:
            assert conn.scalars(sa.select(Client.__table__.c.client_id)).all() == []
    finally:
        engine.dispose()
    assert {p.name: p.read_bytes() for p in pki.folder.iterdir()} == before
    assert not (var / "certs").exists()
    assert "DevClient" not in log.read_text()


def _mtls_get(context: ssl.SSLContext, port: int, path: str, deadline: float) -> tuple[int, bytes]:
    """GET over mutual TLS, retried while the public listener is still starting."""
    last: Exception | None = None
    while time.monotonic() < deadline:
        conn = http.client.HTTPSConnection("localhost", port, timeout=10, context=context)
        try:
            conn.request("GET", path)
            response = conn.getresponse()
            return response.status, response.read()
        except (ConnectionRefusedError, TimeoutError) as exc:
            # A listener that is up but whose workers are still booting holds the handshake.
            last = exc
            time.sleep(0.3)
        finally:
            conn.close()
    raise AssertionError(f"{path} never answered: {last}")

"""The console listener under gunicorn with its own config: TLS when a certificate is given."""

from __future__ import annotations

import ssl
import urllib.request
from pathlib import Path

from broker.clients import certificates as certs
from tests.e2e.console.conftest import console_environment, wait_ready
from tests.support.services import free_port
from tests.support.stack import roles
from tests.support.stack.config import Ports
from tests.support.stack.roster import Stack


def test_the_console_serves_tls_with_the_configured_certificate(tmp_path: Path) -> None:
    # Given a server certificate and the console configured with it
    certs.init_ca(tmp_path / "certs")
    certs.issue_server(tmp_path / "certs", "localhost")
    (tmp_path / "workflows").mkdir()
    port = free_port()
    env = {
        **console_environment(tmp_path, port),
        "BROKER_CONSOLE_TLS_CERT": str(tmp_path / "certs" / "server.pem"),
        "BROKER_CONSOLE_TLS_KEY": str(tmp_path / "certs" / "server.key"),
    }
    (tmp_path / "var").mkdir()
    stack = Stack(tmp_path, env, ports=Ports(console=port))
    process = stack.start("console", roles.listener("console"))
    try:
        context = ssl.create_default_context(cafile=str(tmp_path / "certs" / "ca.pem"))
        url = f"https://localhost:{port}"
        wait_ready(url, process, context=context)
        # Then it answers over TLS 1.2+ and its sign-in cookie would be Secure
        with urllib.request.urlopen(f"{url}/sign-in", context=context, timeout=10) as response:
            assert response.status == 200
            assert "Secure" in response.headers["Set-Cookie"]
        # And plain HTTP gets no page
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5)
            raise AssertionError("plain HTTP was answered")
        except OSError:
            pass
    finally:
        stack.close()

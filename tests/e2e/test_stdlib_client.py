"""The standard-library example client (TLS 1.2 pinned) submits and polls against gunicorn."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.e2e.conftest import Server
from tests.support.services import PROJECT_ROOT

pytestmark = pytest.mark.slow

CLIENT = PROJECT_ROOT / "deploy" / "examples" / "stdlib_client.py"


def run_client(server: Server, *args: str) -> subprocess.CompletedProcess[str]:
    pki = server.pki
    return subprocess.run(
        [
            sys.executable,
            str(CLIENT),
            "--url",
            f"https://localhost:{server.public_port}",
            "--ca",
            str(pki.ca),
            "--cert",
            str(pki.pem("ClientA")),
            "--key",
            str(pki.key("ClientA")),
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_stdlib_client_submits_and_polls_until_terminal(broker_server: Server) -> None:
    # Given a worker stand-in that completes every queued request of ClientA through the callback
    # (started after the client submitted: the client polls while it waits)
    process = subprocess.Popen(
        [
            sys.executable,
            str(CLIENT),
            "--url",
            f"https://localhost:{broker_server.public_port}",
            "--ca",
            str(broker_server.pki.ca),
            "--cert",
            str(broker_server.pki.pem("ClientA")),
            "--key",
            str(broker_server.pki.key("ClientA")),
            "--type",
            "InvoiceProcess",
            "--key-value",
            "InvoiceNumber=INV-7",
            "--key-value",
            "VendorCode=V-1",
            "--payload",
            '{"amount": 7}',
            "--wait",
            "30",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        request_id = _wait_for_queued_invoice(broker_server, "INV-7")
        attempt = broker_server.dispatch(request_id)
        done = broker_server.callback(
            request_id, {"status": "Completed", "result": {"paid": True}}, attempt=attempt
        )
        assert done.status == 204
        stdout, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=5)
    # Then the client exits 0 with the completed record
    assert process.returncode == 0, stderr
    record = json.loads(stdout)
    assert record["correlationId"] == request_id
    assert record["status"] == "Completed"
    assert record["result"] == {"paid": True}


def test_stdlib_client_reports_a_refusal(broker_server: Server) -> None:
    result = run_client(broker_server, "--type", "InvoiceProcess", "--wait", "0")
    assert result.returncode == 1
    assert "Missing required keys" in result.stderr


def _wait_for_queued_invoice(server: Server, number: str) -> str:
    import time

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        page = server.call("ClientA", "GET", "/requests?requestType=InvoiceProcess&limit=20").body
        for item in page["items"]:
            if item["keys"].get("InvoiceNumber") == number:
                return str(item["correlationId"])
        time.sleep(0.1)
    raise AssertionError(f"the client's request {number} never arrived")

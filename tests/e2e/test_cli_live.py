"""The operator CLI as a separate process against the real public gunicorn (mutual TLS).

The CLI gets the listeners' environment, so ``--url`` and ``--ca`` come from the settings
defaults (``https://localhost:<port of BROKER_PUBLIC_BIND>``, ``BROKER_TLS_CLIENT_CA``); only the
client certificate is named. Until the last test no worker runs, so a submitted request stays
Queued; the last one starts a real ``celery -A tasks worker`` on the listeners' transport and
database and watches a request through to Completed.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.e2e.conftest import Server
from tests.support.services import PROJECT_ROOT
from tests.support.stack.roster import running_worker

pytestmark = pytest.mark.slow

# Runs `broker ...` the way the console script does.
LAUNCHER = """
import sys
from broker.cli.main import run_main
sys.exit(run_main(sys.argv[1:]))
"""


def broker(server: Server, *args: str, client: str = "ClientA") -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in server.env.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
    connection = ["--cert", str(server.pki.pem(client)), "--key-file", str(server.pki.key(client))]
    group, command, *rest = args
    return subprocess.run(
        [sys.executable, "-c", LAUNCHER, group, command, *connection, *rest],
        cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def test_cli_submits_reads_back_and_watches_a_queued_request(broker_server: Server) -> None:
    # When an operator submits through the CLI
    submitted = broker(broker_server, "requests", "submit", "InvoiceProcess", "--json",
                       "--key", "InvoiceNumber=INV-CLI", "--key", "VendorCode=V-1",
                       "--payload", '{"amount": 12}')  # fmt: skip
    assert submitted.returncode == 0, submitted.stderr
    request_id = json.loads(submitted.stdout)["correlationId"]
    # Then `get` reads the record back from the broker
    got = broker(broker_server, "requests", "get", request_id, "--json")
    assert got.returncode == 0, got.stderr
    record = json.loads(got.stdout)
    assert record["keys"] == {"InvoiceNumber": "INV-CLI", "VendorCode": "V-1"}
    assert record["status"] == "Queued"
    # And `watch` reports Queued and gives up after its timeout with exit 4 (no worker runs)
    watched = broker(broker_server, "requests", "watch", request_id, "--timeout", "2",
                     "--interval", "0.2")  # fmt: skip
    assert watched.returncode == 4, watched.stderr
    assert watched.stdout.split()[1] == "Queued"


def test_cli_maps_refusals_to_exit_codes(broker_server: Server) -> None:
    missing = broker(broker_server, "requests", "get", "no-such-request")
    refused = broker(broker_server, "requests", "submit", "InvoiceProcess", "--json")
    stranger = broker(broker_server, "requests", "types", client="Stranger")
    assert missing.returncode == 3
    assert refused.returncode == 1
    assert json.loads(refused.stderr)["error"] == "Missing required keys"
    assert stranger.returncode == 1
    assert "Unknown client certificate" in stranger.stderr


def test_outbox_status_reads_the_brokers_database(broker_server: Server) -> None:
    # Given a submission (its outbox row is committed with it)
    assert broker(broker_server, "requests", "submit", "OpenType").returncode == 0
    # When the operator asks for the outbox status (straight from BROKER_DATABASE_URL)
    status = subprocess.run(
        [sys.executable, "-c", LAUNCHER, "outbox", "status", "--json"],
        cwd=PROJECT_ROOT, env=broker_server.env, capture_output=True, text=True, timeout=60,
        check=False,
    )  # fmt: skip
    # Then the row is there, pending or already handed to the transport
    assert status.returncode == 0, status.stderr
    outbox = json.loads(status.stdout)["outbox"]
    assert outbox["pending"] + outbox["dispatched"] + outbox["done"] >= 1


def test_cli_watch_exits_zero_when_a_worker_completes_the_request(broker_server: Server) -> None:
    # Given a worker on the listeners' transport and database (no beat: the fast path suffices)
    log = broker_server.root / "cli-worker.log"
    with running_worker(broker_server.env, log, beat=False, concurrency=1, name="cli") as worker:
        # When an operator submits through the CLI and watches the request
        submitted = broker(broker_server, "requests", "submit", "InvoiceProcess", "--json",
                           "--key", "InvoiceNumber=INV-RUN", "--key", "VendorCode=V-2")  # fmt: skip
        assert submitted.returncode == 0, submitted.stderr
        request_id = json.loads(submitted.stdout)["correlationId"]
        watched = broker(broker_server, "requests", "watch", request_id, "--timeout", "45",
                         "--interval", "0.2")  # fmt: skip
        # Then watch follows it to Completed and exits 0
        assert watched.returncode == 0, f"{watched.stdout}{watched.stderr}\n{worker.tail()}"
    assert watched.stdout.splitlines()[-1].split()[1] == "Completed"
    record = json.loads(broker(broker_server, "requests", "get", request_id, "--json").stdout)
    assert record["status"] == "Completed"
    assert record["workflow"]["subStatus"] == "Finished"

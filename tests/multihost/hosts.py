"""What the multi-host tests share: PostgreSQL inside a test host, the HTTP sink the workflows
call, the client's certificates and allowlist, a mutual-TLS client, the roles' environment and
command lines, and the checks read from the database."""

from __future__ import annotations

import http.client
import http.server
import json
import ssl
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from broker.clients import certificates as certs
from tests.chaos.pg_private import PrivatePostgres
from tests.multihost.netns import Network
from tests.support.processes import process_env

BIN = Path(sys.executable).parent
#: ``celery -A tasks worker`` as the README starts it (a host name is added per host)
WORKER = [str(BIN / "celery"), "-A", "tasks", "worker", "--loglevel", "INFO", "-E",
          "--concurrency", "2"]  # fmt: skip
PUBLIC = [str(BIN / "gunicorn"), "-c", "config/gunicorn.conf.py", "broker.serving.wsgi:public"]


def beat(schedule: Path) -> list[str]:
    return [str(BIN / "celery"), "-A", "tasks", "beat", "--loglevel", "INFO", "--schedule",
            str(schedule)]  # fmt: skip


class NamespacedPostgres(PrivatePostgres):
    """The chaos tests' private cluster, run inside a test host and listening on its address."""

    def __init__(self, binaries: Path, network: Network, host: int) -> None:
        super().__init__(binaries)
        self.network, self.host, self.port = network, host, 5432
        self.address = network.address(host)

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@{self.address}:{self.port}/broker"

    def _run(
        self, program: str, *args: str, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        # the parent's _run, wrapped into the namespace
        argv = [str(self.binaries / program), *args]
        if self._account is not None:
            argv = ["runuser", "-u", "postgres", "--", *argv]
        result = subprocess.run(
            self.network.wrap(self.host, argv),
            cwd=self.folder,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if check and result.returncode != 0:
            raise RuntimeError(f"{program}: {result.stdout}\n{result.stderr}\n{self.log_tail()}")
        return result

    def create(self) -> None:
        self._run(
            "initdb",
            "-D",
            str(self.data),
            "-A",
            "trust",
            "-U",
            "postgres",
            "-E",
            "UTF8",
            "--no-sync",
        )
        # trust the test range too (initdb trusts only loopback and the socket)
        with (self.data / "pg_hba.conf").open("a") as hba:
            hba.write(f"host all all {self.network.prefix}.0/24 trust\n")
        self.start()
        self._run(
            "psql",
            "-h",
            self.address,
            "-p",
            str(self.port),
            "-U",
            "postgres",
            "-d",
            "postgres",
            "-v",
            "ON_ERROR_STOP=1",
            "-c",
            'CREATE DATABASE "broker"',
        )

    def start(self) -> None:
        options = (
            f"-p {self.port} -k {self.folder} -c listen_addresses={self.address} "
            "-c fsync=off -c synchronous_commit=off -c max_connections=200 "
            "-c shared_buffers=32MB -c log_min_messages=warning"
        )
        self._run(
            "pg_ctl",
            "-D",
            str(self.data),
            "-l",
            str(self.log),
            "-o",
            options,
            "-w",
            "-t",
            "60",
            "start",
        )


class Sink:
    """The downstream the workflows call: applies each Idempotency-Key once, records who called,
    and can hold the first call from one address until told to answer."""

    def __init__(self, address: str) -> None:
        self.lock = threading.Lock()
        self.calls: list[tuple[str, str]] = []  # (Idempotency-Key, caller address)
        self.call_times: list[float] = []  # when each call arrived (monotonic)
        self.effects: Counter[str] = Counter()
        self.hold_from: str | None = None
        self.held = threading.Event()
        self.held_key: str | None = None
        self.release = threading.Event()
        sink = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                key = self.headers.get("Idempotency-Key") or ""
                caller = self.client_address[0]
                hold = False
                with sink.lock:
                    sink.calls.append((key, caller))
                    sink.call_times.append(time.monotonic())
                    if sink.hold_from == caller and not sink.held.is_set():
                        sink.held_key, hold = key, True
                        sink.held.set()
                if hold:
                    sink.release.wait(timeout=90)
                with sink.lock:
                    if not sink.effects[key]:
                        sink.effects[key] += 1
                body = b'{"ok": true}'
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer((address, 0), Handler)
        self.port = self.server.server_address[1]
        self.url = f"http://{address}:{self.port}/effect"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


def write_pki_and_config(root: Path, server_address: str) -> dict[str, str]:
    pki = root / "pki"
    certs.init_ca(pki)
    certs.issue_server(pki, server_address)
    certs.issue_client(pki, "ClientA")
    clients = {
        "clients": [
            {
                "clientId": "ClientA",
                "thumbprint": certs.thumbprint(pki / "ClientA.pem"),
                "description": "multi-host test client",
                "scopes": [],
            }
        ]
    }
    rules = {
        "requestTypes": [
            {
                "clientId": "ClientA",
                "requestType": "MultiHost",
                "requiredKeys": [],
                "allowAdditionalKeys": True,
            }
        ]
    }
    (root / "clients.json").write_text(json.dumps(clients))
    (root / "requestTypes.json").write_text(json.dumps(rules))
    return {
        "BROKER_TLS_CERT": str(pki / "server.pem"),
        "BROKER_TLS_KEY": str(pki / "server.key"),
        "BROKER_TLS_CLIENT_CA": str(pki / "ca.pem"),
        "BROKER_CLIENTS_FILE": str(root / "clients.json"),
        "BROKER_REQUEST_TYPES_FILE": str(root / "requestTypes.json"),
    }


class Client:
    def __init__(self, pki: Path, host: str, port: int, *, timeout: float = 15.0) -> None:
        self.timeout = timeout
        self.context = ssl.create_default_context(cafile=str(pki / "ca.pem"))
        self.context.load_cert_chain(pki / "ClientA.pem", pki / "ClientA.key")
        self.host, self.port = host, port

    def submit(self, n: int) -> str | None:
        """POST one request; its correlation id when accepted (202), else None."""
        return self.post(n)[1]

    def post(self, n: int) -> tuple[int, str | None]:
        """POST one request: (HTTP status, 0 without an answer; correlation id when 202)."""
        conn = http.client.HTTPSConnection(
            self.host, self.port, timeout=self.timeout, context=self.context
        )
        try:
            body = json.dumps({"requestType": "MultiHost", "keys": {}, "payload": {"n": n}})
            conn.request(
                "POST", "/requests", body=body, headers={"Content-Type": "application/json"}
            )
            response = conn.getresponse()
            data = response.read()
            accepted = json.loads(data)["correlationId"] if response.status == 202 else None
            return response.status, accepted
        except OSError:
            return 0, None
        finally:
            conn.close()


def redis_up(url: str) -> bool:
    import redis

    try:
        return bool(redis.Redis.from_url(f"{url}/0", socket_timeout=1).ping())
    except redis.RedisError:
        return False


def role_env(env: dict[str, str], var: Path) -> dict[str, str]:
    var.mkdir(parents=True, exist_ok=True)
    return process_env({**env, "BROKER_VAR_DIR": str(var)})


def completed(engine: sa.Engine, request_ids: list[str]) -> int:
    if not request_ids:
        return 0
    with engine.connect() as conn:
        return int(
            conn.execute(
                sa.text(
                    "SELECT count(*) FROM requests WHERE status = 'Completed' AND id = ANY(:ids)"
                ),
                {"ids": request_ids},
            ).scalar()
            or 0
        )


def completion_counts(engine: sa.Engine, request_ids: list[str]) -> dict[str, int]:
    with engine.connect() as conn:
        rows = conn.execute(
            sa.text(
                "SELECT request_id, count(*) FROM request_events "
                "WHERE event_type = 'RequestCompleted' AND request_id = ANY(:ids) "
                "GROUP BY request_id"
            ),
            {"ids": request_ids},
        ).all()
    counts = dict.fromkeys(request_ids, 0)
    counts.update({str(r[0]): int(r[1]) for r in rows})
    return counts


def completed_instances(engine: sa.Engine) -> set[str]:
    with engine.connect() as conn:
        rows = conn.execute(
            sa.text("SELECT id FROM workflow_instances WHERE status = 'Finished'")
        ).all()
    return {str(r[0]) for r in rows}

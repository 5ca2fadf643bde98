"""What the multi-host tests share: the test hosts with PostgreSQL and Redis inside them and the
roles started on them (``namespaced_hosts``), the HTTP sink the workflows call, the client's
certificates and allowlist, a mutual-TLS client, and the checks read from the database."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import http.client
import http.server
import json
import ssl
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from broker.clients import certificates as certs
from broker.store import db
from tests.multihost.netns import Network
from tests.support.services import PROJECT_ROOT
from tests.support.stack import roles
from tests.support.stack.postgres import PrivatePostgres, require_binaries
from tests.support.stack.process import Process, process_env
from tests.support.stack.redis_server import server_argv
from tests.support.stack.roster import Stack as Roster
from tests.support.waits import wait_until
from tests.support.workflows import sink_workflow, write_workflow

BIN = Path(sys.executable).parent
#: the settings both multi-host tests share: short enough that work a cut-off host holds is
#: taken over within the cut (the lock runs out, 4 s, before Redis gives the message to another
#: worker, 8 s)
SETTINGS = {
    "BROKER_DISTRIBUTED": "true",
    "BROKER_WATCH_WORKFLOWS": "false",
    "BROKER_CALLBACK_SECRET": "multi-host-test",
    "BROKER_LOG_FORMAT": "text",
    "BROKER_LOCK_TTL": "4",
    "BROKER_TASK_VISIBILITY_TIMEOUT": "8",
    "BROKER_OUTBOX_LEASE": "8",
    "BROKER_OUTBOX_RELAY_INTERVAL": "0.5",
    "BROKER_BOOKMARK_QUEUE_INTERVAL": "1",
    "BROKER_TIMER_INTERVAL": "1",
    "BROKER_RECOVERY_INTERVAL": "2",
    "BROKER_HEARTBEAT_INTERVAL": "1",
    "BROKER_INACTIVITY_THRESHOLD": "30",
    "BROKER_DRAIN_TIMEOUT": "3",
    "REMAP_SIGTERM": "SIGQUIT",
}
#: the port of the public listener and of Redis on their hosts
PUBLIC_PORT, REDIS_PORT = 5001, 6379


@dataclasses.dataclass
class Hosts:
    """Test hosts (network namespaces on a bridge) with PostgreSQL, Redis and the sink, and
    the roles started on them: a ``tests.support.stack`` stack whose commands run inside."""

    root: Path
    network: Network
    cluster: PrivatePostgres
    sink: Sink
    env: dict[str, str]
    roles: Roster

    def host_env(self, host: int) -> dict[str, str]:
        var = self.root / f"h{host}"
        var.mkdir(parents=True, exist_ok=True)
        return process_env({**self.env, "BROKER_VAR_DIR": str(var)})

    def start(self, name: str, host: int, argv: list[str]) -> Process:
        """Role ``name`` (its log: ``logs/<name>.log``) run inside host ``host``."""
        wrap = functools.partial(self.network.wrap, host)
        return self.roles.start(name, argv, env=self.host_env(host), wrap=wrap)

    def start_roles(self, app: int, work: int) -> None:
        """The database migrated from ``app``; the public listener and a worker on ``app``, a
        worker and beat on ``work``, each from its README command; waits for both workers."""
        migrate = subprocess.run(
            self.network.wrap(app, [str(BIN / "broker"), "db", "upgrade"]),
            env=self.host_env(app),
            cwd=PROJECT_ROOT,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert migrate.returncode == 0, migrate.stderr
        self.start(f"h{app}-ingress", app, roles.listener("public"))
        for host in (app, work):
            worker = roles.worker("worker", events=True, quiet=False, host=f"h{host}")
            self.start(f"h{host}-worker", host, worker)
        self.start(
            f"h{work}-beat", work, roles.beat(self.root / f"h{work}" / "celerybeat-schedule")
        )
        for host in (app, work):
            self.roles[f"h{host}-worker"].wait_for_log(" ready.")

    def text(self, name: str) -> str:
        return self.roles[name].log_text() if name in self.roles else ""

    def tails(self) -> str:
        return self.roles.tails()


@contextlib.contextmanager
def namespaced_hosts(
    root: Path, hosts: int, *, database: int, redis: int, app: int, **settings: str
) -> Iterator[Hosts]:
    """``hosts`` test hosts: PostgreSQL on ``database``, Redis on ``redis``, the public listener
    to be on ``app``; ``settings`` on top of ``SETTINGS``. Everything stopped and removed on the
    way out."""
    network = Network(hosts=hosts)
    roster = Roster(root, {})
    cluster: PrivatePostgres | None = None
    sink: Sink | None = None
    try:
        network.create()
        cluster = PrivatePostgres(
            require_binaries(),
            listen=(network.address(database),),
            port=5432,
            trust=network.prefix,
            wrap=functools.partial(network.wrap, database),
        )
        cluster.create()
        address = network.address(redis)
        redis_url = f"redis://{address}:{REDIS_PORT}"
        roster.start(
            "redis",
            server_argv([address], REDIS_PORT),
            env={"PATH": "/usr/bin:/bin"},
            wrap=functools.partial(network.wrap, redis),
        )
        sink = Sink(network.gateway)
        workflows = root / "workflows"
        write_workflow(workflows, sink_workflow("multi-host", "MultiHost", sink.url))
        env = {
            **SETTINGS,
            "BROKER_DATABASE_URL": cluster.url,
            "BROKER_QUEUE_URL": f"{redis_url}/0",
            "BROKER_LOCK_URL": f"{redis_url}/1",
            "BROKER_WORKFLOW_PATHS": str(workflows),
            "BROKER_HTTP_ALLOWLIST": f"{network.gateway}:*",
            "BROKER_PUBLIC_BIND": f"{network.address(app)}:{PUBLIC_PORT}",
            **settings,
            **write_pki_and_config(root, network.address(app)),
        }
        wait_until(lambda: redis_up(redis_url), timeout=30, what=f"redis on h{redis}")
        yield Hosts(root, network, cluster, sink, env, roster)
    finally:
        if sink is not None:
            sink.close()
        roster.close(10, group=True)
        if cluster is not None:
            cluster.destroy()
        network.destroy()
        db.dispose_engines()


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

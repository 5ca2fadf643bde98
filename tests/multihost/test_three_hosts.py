"""Three test hosts, one cut off mid-burst and rejoined: nothing lost, nothing done twice.

Hosts are network namespaces (``netns.Network``) on one bridge: h1 runs PostgreSQL and Redis
(private instances on its own address), h2 the public listener and a worker, h3 a worker and
beat, each started with the README's per-role command and ``BROKER_DISTRIBUTED=true``. The test
(on the bridge's .254) submits a burst of requests over mutual TLS to h2; each request's workflow
POSTs to an HTTP sink the test serves, which applies each ``Idempotency-Key`` once.

While the burst runs, h3 is cut off at a chosen moment: when the sink holds a call from h3 (its
step is in flight, under the instance lock). The sink answers that call into the dead link. The
lock's TTL runs out, Redis gives the unacknowledged message to h2 after the visibility timeout,
and h2 finishes the request. When h3 rejoins, TCP delivers the old answer, h3's step ends and
tries to save: the fence (the instance's checkpoint, checked in the saving statement) refuses it.

Figures printed: accepted, completed, duplicates, stale saves refused, takeover and recovery
times. Bounded to about two minutes; every namespace and process is removed, whatever happens.
"""

from __future__ import annotations

import contextlib
import http.client
import http.server
import json
import re
import shutil
import ssl
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from broker.clients import certificates as certs
from broker.runtime import ids
from broker.store import db
from tests.chaos.pg_private import PrivatePostgres, require_binaries
from tests.multihost.netns import Network, unavailable
from tests.support.processes import process_env
from tests.support.services import ON_CI, PROJECT_ROOT
from tests.support.waits import wait_until
from tests.support.workflows import sink_workflow, write_workflow

pytestmark = [pytest.mark.multihost, pytest.mark.slow, pytest.mark.timeout(240)]

DB_HOST, APP_HOST, CUT_HOST = 1, 2, 3
REQUESTS = 48
SUBMIT_INTERVAL = 0.25  # seconds between submissions: the burst lasts about 12 s
CUT_SECONDS = 20.0  # longer than the visibility timeout and a restore sweep, with room to spare
BIN = Path(sys.executable).parent


def require_namespaces() -> None:
    reason = unavailable()
    if reason:
        if ON_CI:
            pytest.fail(f"{reason} (CI=true: the multi-host test must run)")
        pytest.skip(reason)
    if shutil.which("redis-server") is None:
        if ON_CI:
            pytest.fail("redis-server is missing (CI=true)")
        pytest.skip("redis-server is missing")


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
    def __init__(self, pki: Path, host: str, port: int) -> None:
        self.context = ssl.create_default_context(cafile=str(pki / "ca.pem"))
        self.context.load_cert_chain(pki / "ClientA.pem", pki / "ClientA.key")
        self.host, self.port = host, port

    def submit(self, n: int) -> str | None:
        """POST one request; its correlation id when accepted (202), else None."""
        conn = http.client.HTTPSConnection(self.host, self.port, timeout=15, context=self.context)
        try:
            body = json.dumps({"requestType": "MultiHost", "keys": {}, "payload": {"n": n}})
            conn.request(
                "POST", "/requests", body=body, headers={"Content-Type": "application/json"}
            )
            response = conn.getresponse()
            data = response.read()
            return json.loads(data)["correlationId"] if response.status == 202 else None
        except OSError:
            return None
        finally:
            conn.close()


@contextlib.contextmanager
def three_hosts(root: Path) -> Iterator[tuple[Network, NamespacedPostgres, Sink, dict[str, str]]]:
    network = Network(hosts=3)
    cluster: NamespacedPostgres | None = None
    sink: Sink | None = None
    try:
        network.create()
        cluster = NamespacedPostgres(require_binaries(), network, DB_HOST)
        cluster.create()
        redis_url = f"redis://{network.address(DB_HOST)}:6379"
        network.start(
            DB_HOST,
            [
                "redis-server",
                "--bind",
                network.address(DB_HOST),
                "--port",
                "6379",
                "--save",
                "",
                "--appendonly",
                "no",
                "--protected-mode",
                "no",
            ],
            env={"PATH": "/usr/bin:/bin"},
            log=root / "redis.log",
        )
        sink = Sink(network.gateway)
        workflows = root / "workflows"
        write_workflow(workflows, sink_workflow("multi-host", "MultiHost", sink.url))
        env = {
            "BROKER_DISTRIBUTED": "true",
            "BROKER_DATABASE_URL": cluster.url,
            "BROKER_QUEUE_URL": f"{redis_url}/0",
            "BROKER_LOCK_URL": f"{redis_url}/1",
            "BROKER_WORKFLOW_PATHS": str(workflows),
            "BROKER_WATCH_WORKFLOWS": "false",
            "BROKER_HTTP_ALLOWLIST": f"{network.gateway}:*",
            "BROKER_HTTP_TIMEOUT": "80",
            "BROKER_CALLBACK_SECRET": "multi-host-test",
            "BROKER_LOG_FORMAT": "text",
            "BROKER_PUBLIC_BIND": f"{network.address(APP_HOST)}:5001",
            # Short enough that a cut-off holder loses its lock and its message within the cut
            # the lock runs out (4 s) before Redis gives the message to another worker (8 s)
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
            **write_pki_and_config(root, network.address(APP_HOST)),
        }
        wait_until(lambda: _redis_up(redis_url), timeout=30, what="redis on h1")
        yield network, cluster, sink, env
    finally:
        if sink is not None:
            sink.close()
        network.stop_processes()
        if cluster is not None:
            cluster.destroy()
        network.destroy()
        db.dispose_engines()


def _redis_up(url: str) -> bool:
    import redis

    try:
        return bool(redis.Redis.from_url(f"{url}/0", socket_timeout=1).ping())
    except redis.RedisError:
        return False


def role_env(env: dict[str, str], var: Path) -> dict[str, str]:
    var.mkdir(parents=True, exist_ok=True)
    return process_env({**env, "BROKER_VAR_DIR": str(var)})


def test_a_host_cut_off_mid_burst_loses_nothing_and_its_stale_step_cannot_commit(
    tmp_path: Path,
) -> None:
    require_namespaces()
    started = time.monotonic()
    with three_hosts(tmp_path) as (network, cluster, sink, env):
        # Given the roles, each from its README command, on their hosts
        migrate = subprocess.run(
            network.wrap(APP_HOST, [str(BIN / "broker"), "db", "upgrade"]),
            env=role_env(env, tmp_path / "h2"),
            cwd=PROJECT_ROOT,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert migrate.returncode == 0, migrate.stderr
        h2, h3 = role_env(env, tmp_path / "h2"), role_env(env, tmp_path / "h3")
        worker = [
            str(BIN / "celery"),
            "-A",
            "tasks",
            "worker",
            "--loglevel",
            "INFO",
            "-E",
            "--concurrency",
            "2",
        ]
        network.start(
            APP_HOST,
            [str(BIN / "gunicorn"), "-c", "config/gunicorn.conf.py", "broker.ingress.wsgi:public"],
            env=h2,
            log=tmp_path / "h2-ingress.log",
            cwd=PROJECT_ROOT,
        )
        network.start(
            APP_HOST,
            [*worker, "--hostname", "worker@h2"],
            env=h2,
            log=tmp_path / "h2-worker.log",
            cwd=PROJECT_ROOT,
        )
        network.start(
            CUT_HOST,
            [*worker, "--hostname", "worker@h3"],
            env=h3,
            log=tmp_path / "h3-worker.log",
            cwd=PROJECT_ROOT,
        )
        network.start(
            CUT_HOST,
            [
                str(BIN / "celery"),
                "-A",
                "tasks",
                "beat",
                "--loglevel",
                "INFO",
                "--schedule",
                str(tmp_path / "h3" / "celerybeat-schedule"),
            ],
            env=h3,
            log=tmp_path / "h3-beat.log",
            cwd=PROJECT_ROOT,
        )
        logs = {
            name: tmp_path / f"{name}.log"
            for name in ("h2-ingress", "h2-worker", "h3-worker", "h3-beat")
        }

        def text(name: str) -> str:
            return logs[name].read_text(errors="replace") if logs[name].exists() else ""

        try:
            for name in ("h2-worker", "h3-worker"):
                wait_until(lambda name=name: " ready." in text(name), timeout=60, what=f"{name}")
            client = Client(tmp_path / "pki", network.address(APP_HOST), 5001)
            first = wait_until(lambda: client.submit(-1), timeout=60, what="the ingress on h2")
            # When a burst runs, and h3 is cut off while the sink holds a call of its step
            sink.hold_from = network.address(CUT_HOST)
            accepted: list[str] = [first]

            def burst() -> None:
                for n in range(REQUESTS):
                    request_id = client.submit(n)
                    if request_id:
                        accepted.append(request_id)
                    time.sleep(SUBMIT_INTERVAL)

            submitter = threading.Thread(target=burst)
            submitter.start()
            assert sink.held.wait(timeout=60), "no call from h3 arrived"
            network.cut(CUT_HOST)
            cut_at = time.monotonic()
            sink.release.set()  # the answer goes into the dead link
            held_instance = (sink.held_key or "").split(":")[0]
            engine = sa.create_engine(cluster.url)
            takeover: float | None = None
            while time.monotonic() - cut_at < CUT_SECONDS:
                if takeover is None and held_instance in _completed_instances(engine):
                    takeover = time.monotonic() - cut_at  # h2 finished the held request
                time.sleep(0.5)
            submitter.join(timeout=60)
            taken_over = _completed_instances(engine)
            network.rejoin(CUT_HOST)
            rejoined_at = time.monotonic()
            # Then every accepted request completes
            wait_until(
                lambda: _completed(engine, accepted) == len(accepted),
                timeout=90,
                interval=0.5,
                what="every accepted request to complete",
            )
            recovered_at = time.monotonic()
            # And h3's stale step, its answer delivered after the rejoin, is refused at the save
            wait_until(
                lambda: held_instance in _dropped(text("h3-worker")),
                timeout=60,
                interval=0.5,
                what="h3's stale save to be refused",
            )
            completions = _completion_counts(engine, accepted)
            duplicates = sum(1 for count in completions.values() if count > 1)
            effects_by_instance = Counter(key.split(":")[0] for key in sink.effects)
            repeated_calls = len(sink.calls) - len({key for key, _ in sink.calls})
            refused = len(_dropped(text("h3-worker")))
            completed = sum(1 for count in completions.values() if count)
            print(
                f"\nmulti-host: accepted={len(accepted)} completed={completed} "
                f"duplicates={duplicates} stale_saves_refused={refused} "
                f"repeated_calls_same_key={repeated_calls} "
                f"cut={CUT_SECONDS:.0f}s held_request_finished_by_h2_after={takeover or -1:.1f}s "
                f"all_completed_after_rejoin={recovered_at - rejoined_at:.1f}s "
                f"total={time.monotonic() - started:.0f}s"
            )
            assert len(accepted) >= REQUESTS // 2, "the ingress refused most of the burst"
            assert duplicates == 0
            assert all(count == 1 for count in completions.values()), completions
            for request_id in accepted:
                instance_id = ids.instance_id_for_request(request_id)
                assert effects_by_instance[instance_id] == 1, request_id
            assert held_instance in taken_over, "h2 did not finish the held request during the cut"
            assert cut_at < rejoined_at
            engine.dispose()
        except BaseException:
            for name in logs:
                print(f"--- {name}\n" + "\n".join(text(name).splitlines()[-40:]))
            raise


STALE = re.compile(r"instance (\S+) moved on; this step's result is dropped")


def _dropped(log: str) -> set[str]:
    return set(STALE.findall(log))


def _completed(engine: sa.Engine, request_ids: list[str]) -> int:
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


def _completion_counts(engine: sa.Engine, request_ids: list[str]) -> dict[str, int]:
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


def _completed_instances(engine: sa.Engine) -> set[str]:
    with engine.connect() as conn:
        rows = conn.execute(
            sa.text("SELECT id FROM workflow_instances WHERE status = 'Finished'")
        ).all()
    return {str(r[0]) for r in rows}

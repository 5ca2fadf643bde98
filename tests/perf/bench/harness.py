"""A private stack on loopback for one benchmark run: start it, watch it, stop it, clean up.

Two backends. The default is production's: a fresh PostgreSQL database on 127.0.0.1:5432
(created here, dropped at the end) and a Redis database number of its own for the transport and
the locks (flushed before and after). ``embedded`` is ``make run``'s: SQLite, the filesystem
transport and file locks, all in the temporary var folder. Either way the run gets generated
certificates, a bench client allowed to submit ``BenchFiveSteps``, free ports on 127.0.0.1, and
every role the README names (gunicorn public listener with mutual TLS, internal listener, one
``celery -A tasks worker``, beat), each started in its own process group and stopped by its PID.

The raw Celery worker (``tests.perf.bench.rawapp``) runs on the same transport with the same worker
options; the harness starts it after the broker's roles are stopped, so the two sides never share
the machine's two cores.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import shutil
import ssl
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from broker.clients import certificates as certs
from broker.errors import BrokerError, ConfigError
from broker.settings import Settings
from tests.perf.bench import WORKFLOW, bench_activities
from tests.perf.bench.cpu import Selector, postgres_pids, redis_pids
from tests.perf.bench.processes import Deadline
from tests.support.stack import roles
from tests.support.stack.config import Ports
from tests.support.stack.process import Process, process_env
from tests.support.stack.roster import Stack as Roster

logger = logging.getLogger(__name__)

BENCH_CLIENT = "BenchClient"
REQUEST_TYPE = "BenchFiveSteps"
WORKFLOW_FILE = "bench-five-steps.json"
DEFAULT_PG_ADMIN_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379"
#: above the range the test suite uses (1..14), so a test run never flushes the bench's queue
DEFAULT_REDIS_DB = 15
START_TIMEOUT = 90.0


@dataclasses.dataclass(frozen=True)
class Backend:
    """Where the stack keeps its data (``embedded``: SQLite, filesystem transport, file locks)."""

    embedded: bool = False
    pg_admin_url: str = DEFAULT_PG_ADMIN_URL
    redis_url: str = DEFAULT_REDIS_URL
    redis_db: int = DEFAULT_REDIS_DB

    @property
    def name(self) -> str:
        return (
            "embedded (SQLite + filesystem + file locks)" if self.embedded else "postgresql+redis"
        )


#: the key a run holds in its Redis database while it uses it, and how long it lives unrefreshed
CLAIM_KEY = "broker:bench:claim"
CLAIM_TTL_SECONDS = 30


class Stack:
    """The broker's roles and the raw Celery worker for one run, in a temporary folder."""

    def __init__(self, backend: Backend, *, concurrency: int, deadline: Deadline) -> None:
        self.backend = backend
        self.concurrency = concurrency
        self.deadline = deadline
        self.root = Path(tempfile.mkdtemp(prefix="broker-bench-"))
        self.var = self.root / "var"
        self.certs = self.root / "certs"
        self.logs = self.root / "logs"
        self.ports = Ports()
        self.public_port = self.ports.public
        self.internal_port = self.ports.internal
        self.token = uuid.uuid4().hex[:10]
        self.database_name: str | None = None
        self.roles = Roster(self.root, {}, ports=self.ports)
        self.env: dict[str, str] = {}
        self._factory: sessionmaker[Session] | None = None
        self._claim = f"{os.getpid()}:{self.token}"
        self._claimed = threading.Event()
        self._released = threading.Event()

    # Lifecycle -----------------------------------------------------------------------------------

    def __enter__(self) -> Stack:
        try:
            self.prepare()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def prepare(self) -> None:
        """Folders, certificates, allowlist, workflow, database (migrated) and transport."""
        for folder in (self.var, self.certs, self.logs, self.root / "config", self.root / "wf"):
            folder.mkdir(parents=True, exist_ok=True)
        certs.init_ca(self.certs)
        certs.issue_server(self.certs, "localhost")
        certs.issue_client(self.certs, BENCH_CLIENT)
        config = self._write_config()
        database_url, queue_url, lock_url = self._backends()
        (self.root / "prometheus").mkdir()
        self.env = {
            "BROKER_VAR_DIR": str(self.var),
            "BROKER_DATABASE_URL": database_url,
            "BROKER_QUEUE_URL": queue_url,
            "BROKER_LOCK_URL": lock_url,
            "BROKER_PUBLIC_BIND": f"127.0.0.1:{self.public_port}",
            "BROKER_INTERNAL_BIND": f"127.0.0.1:{self.internal_port}",
            "BROKER_TLS_CERT": str(self.certs / "server.pem"),
            "BROKER_TLS_KEY": str(self.certs / "server.key"),
            "BROKER_TLS_CLIENT_CA": str(self.certs / "ca.pem"),
            "BROKER_CALLBACK_SECRET": uuid.uuid4().hex,
            "BROKER_SMTP_URL": f"file://{self.var / 'mail'}",
            "BROKER_WATCH_WORKFLOWS": "false",
            "BROKER_WORKER_CONCURRENCY": str(self.concurrency),
            # Per-request INFO lines would measure the log handler; both sides log warnings only.
            "BROKER_LOG_LEVEL": "WARNING",
            "BROKER_LOG_FORMAT": "text",
            "PROMETHEUS_MULTIPROC_DIR": str(self.root / "prometheus"),
            **config,
        }
        self.roles = Roster(self.root, self.env, ports=self.ports)
        self.env = self.roles.env
        from broker.registry import WorkflowRegistry
        from broker.store import db

        db.upgrade(database_url)
        # Publish the workflow once, here, so the listeners and the worker find it loaded.
        registry = WorkflowRegistry(self.settings, self.factory)
        registry.load()
        if registry.problems:
            raise ConfigError(f"bench workflow problems: {registry.problems}")

    def close(self) -> None:
        """Stop every started process by PID, drop the database, flush Redis, remove the folder."""
        self.roles.close(20)
        if self._factory is not None:
            bind = self._factory.kw.get("bind")
            if bind is not None:
                bind.dispose()
        from broker.store import db

        db.dispose_engines()
        if self.database_name is not None:
            try:
                self._drop_database()
            except Exception:
                logger.warning("could not drop database %s", self.database_name, exc_info=True)
        self._released.set()
        if self._claimed.is_set():
            # Only the run that claimed the database empties it (the claim goes with it).
            with contextlib.suppress(Exception):
                self._redis().flushdb()
        shutil.rmtree(self.root, ignore_errors=True)

    def _claim_redis(self) -> None:
        """Hold the Redis database for this run, or refuse: two runs on one database would
        consume each other's tasks and empty each other's queues. The claim expires unless
        refreshed, so a run that was killed does not block the next one for long."""
        client = self._redis()
        if not client.set(CLAIM_KEY, self._claim, nx=True, ex=CLAIM_TTL_SECONDS):
            holder = (client.get(CLAIM_KEY) or b"?").decode(errors="replace").split(":")[0]
            raise ConfigError(
                f"Redis database {self.backend.redis_db} is in use by another broker bench "
                f"(process {holder}); wait for it to end, or pass --redis-db with a free database"
            )
        self._claimed.set()
        # Empty what an earlier run may have left, keeping the claim.
        for key in client.scan_iter(count=1000):
            if key != CLAIM_KEY.encode():
                client.delete(key)

        def refresh() -> None:
            while not self._released.wait(CLAIM_TTL_SECONDS / 3):
                with contextlib.suppress(Exception):
                    client.set(CLAIM_KEY, self._claim, xx=True, ex=CLAIM_TTL_SECONDS)

        threading.Thread(target=refresh, name="bench-redis-claim", daemon=True).start()

    # Configuration -------------------------------------------------------------------------------

    @property
    def settings(self) -> Settings:
        return Settings.from_env({k: v for k, v in self.env.items() if k.startswith("BROKER_")})

    @property
    def factory(self) -> sessionmaker[Session]:
        """Sessions on the stack's database (the harness reads timestamps and counts with it)."""
        if self._factory is None:
            from broker.store import db

            self._factory = db.make_session_factory(db.make_engine(self.settings.database_url))
        return self._factory

    def client_pem(self) -> Path:
        return self.certs / f"{BENCH_CLIENT}.pem"

    def client_key(self) -> Path:
        return self.certs / f"{BENCH_CLIENT}.key"

    def ca(self) -> Path:
        return self.certs / "ca.pem"

    def client_context(self) -> ssl.SSLContext:
        """A TLS context presenting the bench client's certificate and trusting the run's CA."""
        context = ssl.create_default_context(cafile=str(self.ca()))
        context.load_cert_chain(str(self.client_pem()), str(self.client_key()))
        return context

    def _write_config(self) -> dict[str, str]:
        config = self.root / "config"
        clients = {
            "clients": [
                {
                    "clientId": BENCH_CLIENT,
                    "thumbprint": certs.thumbprint(self.client_pem()),
                    "description": "benchmark client",
                    "scopes": [],
                }
            ]
        }
        rules = {
            "requestTypes": [
                {
                    "clientId": BENCH_CLIENT,
                    "requestType": name,
                    "requiredKeys": [],
                    "allowAdditionalKeys": True,
                }
                for name in (REQUEST_TYPE, *bench_activities.REQUEST_TYPES)
            ]
        }
        (config / "clients.json").write_text(json.dumps(clients))
        (config / "requestTypes.json").write_text(json.dumps(rules))
        shutil.copy(WORKFLOW, self.root / "wf" / WORKFLOW_FILE)
        for name, document in bench_activities.workflows().items():
            (self.root / "wf" / name).write_text(json.dumps(document))
        return {
            "BROKER_TASK_MODULES": f"tasks,{bench_activities.MODULE}",
            "BROKER_CLIENTS_FILE": str(config / "clients.json"),
            "BROKER_REQUEST_TYPES_FILE": str(config / "requestTypes.json"),
            "BROKER_WORKFLOW_PATHS": str(self.root / "wf"),
        }

    def _backends(self) -> tuple[str, str, str]:
        """(database URL, queue URL, lock URL), creating the database and claiming Redis."""
        if self.backend.embedded:
            return (
                f"sqlite:///{self.var / 'broker.db'}",
                "filesystem://",
                f"file://{self.var / 'locks'}",
            )
        import sqlalchemy as sa

        self._claim_redis()
        self.database_name = f"broker_bench_{self.token}"
        admin = sa.create_engine(self.backend.pg_admin_url, isolation_level="AUTOCOMMIT")
        try:
            with admin.connect() as conn:
                conn.execute(sa.text(f'CREATE DATABASE "{self.database_name}"'))
        finally:
            admin.dispose()
        base = self.backend.pg_admin_url.rsplit("/", 1)[0]
        redis = f"{self.backend.redis_url.rstrip('/')}/{self.backend.redis_db}"
        return f"{base}/{self.database_name}", redis, redis

    def _drop_database(self) -> None:
        import sqlalchemy as sa

        admin = sa.create_engine(self.backend.pg_admin_url, isolation_level="AUTOCOMMIT")
        try:
            with admin.connect() as conn:
                conn.execute(
                    sa.text(f'DROP DATABASE IF EXISTS "{self.database_name}" WITH (FORCE)')
                )
        finally:
            admin.dispose()
        self.database_name = None

    def _redis(self) -> Any:
        import redis

        return redis.Redis.from_url(f"{self.backend.redis_url.rstrip('/')}/{self.backend.redis_db}")

    # Roles ---------------------------------------------------------------------------------------

    def start(self, name: str, argv: list[str], env: Mapping[str, str] | None = None) -> Process:
        """Start one role as the leader of its own process group, logging to ``logs/<name>.log``."""
        return self.roles.start(name, argv, env=process_env(env) if env is not None else None)

    def stop(self, name: str) -> None:
        self.roles.stop(name)

    def check_alive(self) -> None:
        """Raise when a started role has exited (its log's tail says why)."""
        for process in self.roles.processes.values():
            if not process.running:
                code = process.proc.returncode if process.proc is not None else None
                raise BrokerError(
                    f"{process.name} exited with code {code}:\n{process.tail(30)}",
                    role=process.name,
                )

    def _celery_worker(self, app: str, name: str, queues: str | None = None) -> list[str]:
        argv = [
            sys.executable,
            "-m",
            "celery",
            "-A",
            app,
            "worker",
            "--concurrency",
            str(self.concurrency),
            "--loglevel",
            "WARNING",
            "-n",
            f"{name}-{self.token}@%h",
        ]
        return argv + (["-Q", queues] if queues else [])

    def start_listeners(self) -> None:
        """Public (mTLS) and internal gunicorn, and beat; waits until both listeners answer."""
        self.start("public", roles.listener("public"))
        self.start("internal", roles.listener("internal"))
        self.start(
            "beat",
            [*roles.beat(self.var / "celerybeat-schedule", loglevel="WARNING"),
             "--pidfile", str(self.var / "beat.pid")],
        )  # fmt: skip
        self._wait_ready()

    def start_worker(self) -> Process:
        return self.start("worker", self._celery_worker("tasks", "bench"))

    def stop_broker(self) -> None:
        for name in ("worker", "beat", "public", "internal"):
            self.stop(name)

    def start_raw_worker(self) -> Process:
        from tests.perf.bench.raw_celery import RAW_QUEUE

        return self.start(
            "raw-worker", self._celery_worker("tests.perf.bench.rawapp", "raw", RAW_QUEUE)
        )

    def worker_pid(self, name: str = "worker") -> int:
        return self.roles[name].pid

    # CPU -----------------------------------------------------------------------------------------

    def tree(self, *names: str) -> list[int]:
        """The pids of the named roles and all their descendants (pool children, gunicorn
        workers), as they are now; a stopped role has none."""
        return [pid for name in names for pid in self.roles.pids(name)]

    def cpu_groups(self, *, raw: bool = False) -> dict[str, Selector]:
        """The processes of the broker's stack (or raw Celery's) by group, for ``cpu.CpuMeter``."""

        def roles(*names: str) -> Selector:
            return lambda: self.tree(*names)

        groups: dict[str, Selector]
        if raw:
            groups = {"worker": roles("raw-worker")}
        else:
            groups = {
                "ingress": roles("public", "internal"),
                "worker": roles("worker"),
                "beat": roles("beat"),
            }
        if not self.backend.embedded:
            if not raw and self.database_name is not None:
                database = self.database_name
                groups["postgres"] = lambda: postgres_pids(database)
            groups["redis"] = self._redis_server
        return groups

    def _redis_server(self) -> Iterable[int]:
        return redis_pids(urllib.parse.urlsplit(self.backend.redis_url).port or 6379)

    def _wait_ready(self) -> None:
        """Until /readyz answers 200 and the public API answers the bench client."""
        started = time.monotonic()
        ready_url = f"http://127.0.0.1:{self.internal_port}/readyz"
        context = self.client_context()
        public_url = f"https://127.0.0.1:{self.public_port}/request-types"
        last: Exception | None = None
        while time.monotonic() - started < START_TIMEOUT:
            self.deadline.check("starting the listeners")
            self.check_alive()
            try:
                with urllib.request.urlopen(ready_url, timeout=5) as response:
                    response.read()
                with urllib.request.urlopen(public_url, timeout=5, context=context) as response:
                    response.read()
                return
            except OSError as exc:  # refused while booting, 503 while the app builds
                last = exc
                time.sleep(0.2)
        raise BrokerError(f"the listeners did not become ready in {START_TIMEOUT:.0f}s: {last}")

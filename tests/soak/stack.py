"""The soak's stack: private PostgreSQL and Redis (restarted by the faults), the roles started
with the deploy files' commands, and one worker on a host of its own that can be cut off.

The servers listen on loopback and on the test bridge's address, where the namespaced worker
reaches them (``tests/multihost/netns.py``); without network namespaces (no root) everything is
on loopback and the partition fault is skipped. Every process leads its own process group and is
stopped by its pid.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from broker.clients import certificates as certs
from tests.chaos.pg_private import PrivatePostgres, require_binaries
from tests.chaos.redis_private import PrivateRedis
from tests.multihost.netns import Network, unavailable
from tests.perf.bench.processes import Child, children_of, free_port, stop_child, tail
from tests.support.services import PROJECT_ROOT

logger = logging.getLogger(__name__)

CLIENT = "SoakClient"
PARTITION_HOST = 1
START_TIMEOUT = 90.0


class SoakPostgres(PrivatePostgres):
    """The chaos tests' private cluster, listening on loopback and on ``address``."""

    def __init__(self, address: str, prefix: str | None) -> None:
        super().__init__(require_binaries())
        self.address, self.prefix = address, prefix

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@{self.address}:{self.port}/broker"

    def create(self) -> None:
        super().create()
        if self.prefix:  # trust the test range too (initdb trusts only loopback and the socket)
            with (self.data / "pg_hba.conf").open("a") as hba:
                hba.write(f"host all all {self.prefix}.0/24 trust\n")
            self.stop()
            self.start()

    def start(self) -> None:
        listen = "127.0.0.1" if self.address == "127.0.0.1" else f"127.0.0.1,{self.address}"
        self._run(
            "pg_ctl",
            "-D",
            str(self.data),
            "-l",
            str(self.log),
            "-o",
            f"-p {self.port} -k {self.folder} -c listen_addresses={listen} "
            # A commit is written to the OS before the 202 (synchronous_commit), so the
            # postmaster's kill (a fault) loses no accepted request; fsync stays off, as the
            # machine itself never crashes in the soak.
            "-c fsync=off -c synchronous_commit=on -c max_connections=300 "
            "-c shared_buffers=32MB -c log_min_messages=warning",
            "-w",
            "-t",
            "60",
            "start",
        )


class SoakRedis(PrivateRedis):
    """The chaos tests' private Redis (no persistence: a restart loses every message), bound to
    loopback and ``address``."""

    def __init__(self, folder: Path, address: str) -> None:
        super().__init__(folder)
        self.address = address

    @property
    def url(self) -> str:
        return f"redis://{self.address}:{self.port}/0"

    def start(self) -> None:
        bind = ["127.0.0.1"] + ([self.address] if self.address != "127.0.0.1" else [])
        subprocess.run(
            [
                "redis-server",
                "--daemonize",
                "yes",
                "--bind",
                *bind,
                "--port",
                str(self.port),
                "--save",
                "",
                "--appendonly",
                "no",
                "--protected-mode",
                "no",
                "--maxmemory-policy",
                "noeviction",
                "--dir",
                str(self.folder),
                "--logfile",
                str(self.folder / "redis.log"),
                "--pidfile",
                str(self.folder / "redis.pid"),
            ],
            check=True,
            timeout=10,
        )
        deadline = time.monotonic() + 10
        while self.client_or_none() is None:
            if time.monotonic() > deadline:
                raise RuntimeError("redis did not start")
            time.sleep(0.1)

    def client_or_none(self) -> Any:
        import redis

        client = redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=2)
        try:
            client.ping()
        except redis.RedisError:
            return None
        return client


class Stack:
    """Servers, configuration and roles of one soak run, in a temporary folder."""

    def __init__(self, env_overrides: Mapping[str, str]) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="broker-soak-"))
        self.logs = self.root / "logs"
        self.wf = self.root / "workflows"
        for folder in (self.logs, self.wf, self.root / "config", self.root / "var"):
            folder.mkdir(parents=True, exist_ok=True)
        reason = unavailable()
        self.network: Network | None = None if reason else Network(hosts=1)
        self.partition_reason = reason
        self.address = "127.0.0.1"
        self.overrides = dict(env_overrides)
        self.public_port = free_port()
        self.internal_port = free_port()
        self.children: dict[str, Child] = {}
        self.postgres: SoakPostgres | None = None
        self.redis: SoakRedis | None = None
        self.env: dict[str, str] = {}

    # Servers and configuration -------------------------------------------------------------------

    def start_servers(self) -> None:
        """The namespaces (when possible), PostgreSQL and Redis."""
        if self.network is not None:
            self.network.create()
            self.address = self.network.gateway
        prefix = self.network.prefix if self.network is not None else None
        self.postgres = SoakPostgres(self.address, prefix)
        self.postgres.create()
        self.redis = SoakRedis(self.root / "redis", self.address)
        self.redis.start()

    def configure(
        self,
        workflows: Mapping[str, Mapping[str, Any]],
        request_types: list[str],
        webhook_url: str,
    ) -> None:
        """Workflow files, certificates, allowlist and environment; migrate and publish."""
        assert self.postgres is not None
        assert self.redis is not None
        for name, document in workflows.items():
            (self.wf / f"{name}.json").write_text(json.dumps(document, indent=2))
        self.env = {
            **{
                k: v
                for k, v in os.environ.items()  # noqa: TID251 - the children's PATH, HOME
                if not k.startswith(("BROKER_", "GUNICORN_", "PROMETHEUS_", "CELERY_"))
            },
            "PYTHONPATH": str(PROJECT_ROOT),
            "BROKER_VAR_DIR": str(self.root / "var"),
            "BROKER_DATABASE_URL": self.postgres.url,
            "BROKER_QUEUE_URL": self.redis.url,
            "BROKER_LOCK_URL": self.redis.url.rsplit("/", 1)[0] + "/1",
            "BROKER_DISTRIBUTED": "true",
            "BROKER_WORKFLOW_PATHS": str(self.wf),
            "BROKER_WATCH_WORKFLOWS": "false",
            "BROKER_PUBLIC_BIND": f"127.0.0.1:{self.public_port}",
            "BROKER_INTERNAL_BIND": f"127.0.0.1:{self.internal_port}",
            "BROKER_HTTP_ALLOWLIST": f"{self.address}:*",
            "BROKER_CALLBACK_SECRET": "soak-callback-secret",
            "BROKER_SMTP_URL": f"file://{self.root / 'var' / 'mail'}",
            "BROKER_LOG_FORMAT": "text",
            "REMAP_SIGTERM": "SIGQUIT",
            **self._pki_and_config(request_types, webhook_url),
            **self.overrides,
        }
        from broker.registry import WorkflowRegistry
        from broker.settings import Settings
        from broker.store import db

        db.upgrade(self.postgres.url)
        settings = Settings.from_env({k: v for k, v in self.env.items() if k.startswith("BROKER_")})
        registry = WorkflowRegistry(
            settings, db.make_session_factory(db.make_engine(settings.database_url))
        )
        registry.load()
        if registry.problems:
            raise RuntimeError(f"soak workflow problems: {registry.problems}")
        registry.stop()

    def _pki_and_config(self, request_types: list[str], webhook_url: str) -> dict[str, str]:
        pki = self.root / "pki"
        certs.init_ca(pki)
        certs.issue_server(pki, "localhost")
        certs.issue_client(pki, CLIENT)
        config = self.root / "config"
        clients = {
            "clients": [
                {
                    "clientId": CLIENT,
                    "thumbprint": certs.thumbprint(pki / f"{CLIENT}.pem"),
                    "description": "soak client",
                    "scopes": [],
                    "rateLimits": {"submissions": "unlimited", "events": "unlimited"},
                    "webhooks": [
                        {
                            "url": webhook_url,
                            "events": [
                                "request.completed",
                                "request.faulted",
                                "request.cancelled",
                            ],
                        }
                    ],
                }
            ]
        }
        rules = {
            "requestTypes": [
                {
                    "clientId": CLIENT,
                    "requestType": kind,
                    "requiredKeys": [],
                    "allowAdditionalKeys": True,
                }
                for kind in request_types
            ]
        }
        (config / "clients.json").write_text(json.dumps(clients))
        (config / "requestTypes.json").write_text(json.dumps(rules))
        return {
            "BROKER_TLS_CERT": str(pki / "server.pem"),
            "BROKER_TLS_KEY": str(pki / "server.key"),
            "BROKER_TLS_CLIENT_CA": str(pki / "ca.pem"),
            "BROKER_CLIENTS_FILE": str(config / "clients.json"),
            "BROKER_REQUEST_TYPES_FILE": str(config / "requestTypes.json"),
        }

    def pki(self) -> Path:
        return self.root / "pki"

    # Roles: the deploy files' commands (deploy/Procfile) -----------------------------------------

    def role_argv(self, role: str) -> list[str]:
        py = sys.executable
        if role == "public":
            return [
                py,
                "-m",
                "gunicorn",
                "-c",
                "config/gunicorn.conf.py",
                "broker.serving.wsgi:public",
            ]
        if role == "internal":
            return [
                py, "-m", "gunicorn", "-c", "config/gunicorn_internal.conf.py",
                "broker.serving.wsgi:internal",
            ]  # fmt: skip
        if role == "beat":
            schedule = self.root / "var" / "celerybeat-schedule"
            return [
                py,
                "-m",
                "celery",
                "-A",
                "tasks",
                "beat",
                "--loglevel",
                "INFO",
                "--schedule",
                str(schedule),
            ]
        if role.startswith("worker"):
            return [
                py, "-m", "celery", "-A", "tasks", "worker", "--loglevel", "INFO", "-E",
                "--concurrency", self.overrides.get("SOAK_WORKER_CONCURRENCY", "3"),
                "-n", f"{role}@%h",
            ]  # fmt: skip
        raise ValueError(f"unknown role {role!r}")

    def start(self, role: str) -> Child:
        log = self.logs / f"{role}.log"
        argv = self.role_argv(role)
        env = dict(self.env)
        if role == "worker2" and self.network is not None:
            argv = self.network.wrap(PARTITION_HOST, argv)
            env["BROKER_WORKER_METRICS_BIND"] = ""
        with log.open("ab") as sink:
            process = subprocess.Popen(
                argv,
                cwd=PROJECT_ROOT,
                env=env,
                stdout=sink,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        child = Child(role, process, log)
        self.children[role] = child
        logger.info("started %s (pid %d)", role, process.pid)
        return child

    def stop(self, role: str, grace: float = 30.0) -> None:
        child = self.children.pop(role, None)
        if child is not None:
            stop_child(child, grace)

    def kill(self, role: str) -> None:
        """SIGKILL the role's whole process group (a crash, not a shutdown)."""
        child = self.children.pop(role, None)
        if child is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.process.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.process.wait(timeout=10)

    def pids(self, role: str) -> list[int]:
        child = self.children.get(role)
        if child is None or child.process.poll() is not None:
            return []
        return [child.process.pid, *children_of(child.process.pid)]

    def wait_ready(self) -> None:
        """Until /readyz answers 200 (database and transport reachable)."""
        deadline = time.monotonic() + START_TIMEOUT
        url = f"http://127.0.0.1:{self.internal_port}/readyz"
        while True:
            try:
                with urllib.request.urlopen(url, timeout=5) as response:
                    if response.status == 200:
                        return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"the stack was not ready in {START_TIMEOUT:.0f}s:\n"
                    + "\n".join(
                        f"--- {name}\n{tail(child.log)}" for name, child in self.children.items()
                    )
                )
            time.sleep(0.5)

    def close(self, keep: Path | None = None) -> None:
        """Stop every role by pid, the servers and the namespaces; keep the logs in ``keep``."""
        for role in list(self.children):
            self.stop(role, grace=15)
        from broker.store import db

        db.dispose_engines()
        if self.redis is not None:
            with contextlib.suppress(Exception):
                self.redis.stop()
        if self.postgres is not None:
            self.postgres.destroy()
        if self.network is not None:
            self.network.destroy()
        if keep is not None:
            shutil.rmtree(keep, ignore_errors=True)
            shutil.copytree(self.logs, keep)
        shutil.rmtree(self.root, ignore_errors=True)

"""The soak's stack: private PostgreSQL and Redis (restarted by the faults), the roles started
with the deploy files' commands, and one worker on a host of its own that can be cut off.

The servers (``tests.support.stack``'s own PostgreSQL and Redis) listen on loopback and on the
test bridge's address, where the namespaced worker reaches them (``tests/multihost/netns.py``);
without network namespaces (no root) everything is on loopback and the partition fault is
skipped. The roles are a ``tests.support.stack`` stack: each leads its own process group and is
stopped by its pid.
"""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from broker.clients import certificates as certs
from tests.multihost.netns import Network, unavailable
from tests.support.stack import config, roles
from tests.support.stack.config import Ports
from tests.support.stack.postgres import PrivatePostgres, require_binaries
from tests.support.stack.process import Process
from tests.support.stack.redis_server import PrivateRedis
from tests.support.stack.roster import Stack as Roster

logger = logging.getLogger(__name__)

CLIENT = "SoakClient"
PARTITION_HOST = 1
START_TIMEOUT = 90.0


#: the soak's server options: a commit is written to the OS before the 202
#: (synchronous_commit), so the postmaster's kill (a fault) loses no accepted request; fsync
#: stays off, as the machine itself never crashes in the soak
POSTGRES_OPTIONS = (
    "-c fsync=off",
    "-c synchronous_commit=on",
    "-c max_connections=300",
    "-c shared_buffers=32MB",
    "-c log_min_messages=warning",
)


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
        self.ports = Ports()
        self.roles: Roster | None = None
        self.postgres: PrivatePostgres | None = None
        self.redis: PrivateRedis | None = None
        self.env: dict[str, str] = {}

    @property
    def public_port(self) -> int:
        return self.ports.public

    @property
    def children(self) -> dict[str, Process]:
        """The running roles by name."""
        return self.roles.processes if self.roles is not None else {}

    # Servers and configuration -------------------------------------------------------------------

    def start_servers(self) -> None:
        """The namespaces (when possible), PostgreSQL and Redis."""
        if self.network is not None:
            self.network.create()
            self.address = self.network.gateway
        prefix = self.network.prefix if self.network is not None else None
        # loopback, and the bridge's address where the namespaced worker reaches them
        listen = ("127.0.0.1",) if self.address == "127.0.0.1" else (self.address, "127.0.0.1")
        self.postgres = PrivatePostgres(
            require_binaries(), listen=listen, trust=prefix, options=POSTGRES_OPTIONS
        )
        self.postgres.create()
        self.redis = PrivateRedis(self.root / "redis", listen=listen)
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
        lock_url = self.redis.url.rsplit("/", 1)[0] + "/1"
        self.roles = Roster(
            self.root,
            {
                **config.services(self.root / "var", self.postgres.url, self.redis.url, lock_url),
                **self.ports.binds(),
                "BROKER_DISTRIBUTED": "true",
                "BROKER_WORKFLOW_PATHS": str(self.wf),
                "BROKER_WATCH_WORKFLOWS": "false",
                "BROKER_HTTP_ALLOWLIST": f"{self.address}:*",
                "BROKER_CALLBACK_SECRET": "soak-callback-secret",
                "REMAP_SIGTERM": "SIGQUIT",
                **self._pki_and_config(request_types, webhook_url),
                **self.overrides,
            },
            ports=self.ports,
        )
        self.env = self.roles.env
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
        concurrency = int(self.overrides.get("SOAK_WORKER_CONCURRENCY", "3"))
        return roles.role(role, self.root / "var", concurrency=concurrency)

    def _roster(self) -> Roster:
        assert self.roles is not None, "configure the stack first"
        return self.roles

    def start(self, role: str) -> Process:
        """Start ``role``; ``worker2`` runs on a host of its own when there are namespaces."""
        roster = self._roster()
        if role == "worker2" and self.network is not None:
            network = self.network
            return roster.start(
                role,
                self.role_argv(role),
                env={**roster.env, "BROKER_WORKER_METRICS_BIND": ""},
                wrap=lambda argv: network.wrap(PARTITION_HOST, argv),
            )
        return roster.start(role, self.role_argv(role))

    def stop(self, role: str, grace: float = 30.0) -> None:
        self._roster().stop(role, grace)

    def kill(self, role: str) -> None:
        """SIGKILL the role's whole process group (a crash, not a shutdown)."""
        self._roster().kill(role)

    def pids(self, role: str) -> list[int]:
        return self._roster().pids(role)

    def wait_ready(self) -> None:
        """Until /readyz answers 200 (database and transport reachable)."""
        self._roster().wait_ready(timeout=START_TIMEOUT)

    def close(self, keep: Path | None = None) -> None:
        """Stop every role by pid, the servers and the namespaces; keep the logs in ``keep``."""
        if self.roles is not None:
            self.roles.close(15)
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

"""The soak's faults, one after another on a schedule, each recorded with its time.

Every fault ends with the stack whole again: a killed role is started again, a stopped or killed
server restarted, a cut host rejoined. The partition needs network namespaces (root); without
them it is recorded as skipped.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from tests.soak.stack import PARTITION_HOST, Stack

logger = logging.getLogger(__name__)

#: seconds the cut-off worker stays unreachable (longer than the visibility timeout and the lock
#: TTL the soak sets, so its work is taken over)
PARTITION_SECONDS = 25.0
OUTAGE_SECONDS = 2.0


class Faults:
    def __init__(self, stack: Stack, started: float) -> None:
        self.stack = stack
        self.started = started
        self.log: list[tuple[float, str]] = []
        self.stopping = threading.Event()
        self.thread: threading.Thread | None = None
        self.errors: list[str] = []
        #: set while a fault runs (a role it stopped is down on purpose then)
        self.busy = threading.Event()

    def catalog(self) -> list[tuple[str, Callable[[], None]]]:
        return [
            ("worker SIGKILL", self.worker_sigkill),
            ("worker SIGTERM drain", self.worker_drain),
            ("Redis restart", self.redis_restart),
            ("PostgreSQL restart", self.postgres_restart),
            ("PostgreSQL killed (failover stand-in)", self.postgres_killed),
            ("beat killed", self.beat_killed),
            ("ingress restart", self.ingress_restart),
            ("worker host partitioned", self.partition),
        ]

    def run_on_schedule(self, first: float, every: float, until: float) -> None:
        """Fire the catalog in turn from ``first`` seconds, every ``every`` seconds, the last one
        starting before ``until`` (seconds after the start)."""

        def loop() -> None:
            faults = self.catalog()
            n = 0
            at = first
            while at < until:
                if self.stopping.wait(max(0.0, self.started + at - time.monotonic())):
                    return
                name, action = faults[n % len(faults)]
                self.log.append((time.monotonic() - self.started, name))
                logger.info("fault: %s", name)
                self.busy.set()
                try:
                    action()
                except Exception as exc:
                    logger.exception("fault %s failed", name)
                    self.errors.append(f"{name}: {exc}")
                finally:
                    self.busy.clear()
                n += 1
                at += every

        self.thread = threading.Thread(target=loop, name="soak-faults", daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.stopping.set()
        if self.thread is not None:
            self.thread.join(120)

    # The faults ----------------------------------------------------------------------------------

    def worker_sigkill(self) -> None:
        self.stack.kill("worker1")
        time.sleep(1.0)
        self.stack.start("worker1")

    def worker_drain(self) -> None:
        # SIGTERM to the main process; REMAP_SIGTERM=SIGQUIT (the deploy files') makes it drain
        process = self.stack.children.get("worker1")
        if process is not None and process.proc is not None:
            process.terminate()
            try:
                process.proc.wait(timeout=60)
            finally:
                self.stack.kill("worker1")  # whatever is left of its group
        self.stack.start("worker1")

    def redis_restart(self) -> None:
        assert self.stack.redis is not None
        self.stack.redis.stop()
        time.sleep(OUTAGE_SECONDS)
        self.stack.redis.start()

    def postgres_restart(self) -> None:
        assert self.stack.postgres is not None
        self.stack.postgres.stop("fast")
        time.sleep(OUTAGE_SECONDS)
        self.stack.postgres.start()

    def postgres_killed(self) -> None:
        """The postmaster SIGKILLed and started again after crash recovery: what a failover is
        to the broker on one machine (every session cut at once, 503s, reconnects, the relay
        republishing what was in flight), with the same server coming back instead of a
        promoted standby (``tests/chaos/test_chaos_failover.py`` promotes a real one)."""
        assert self.stack.postgres is not None
        self.stack.postgres.kill()
        time.sleep(OUTAGE_SECONDS)
        self.stack.postgres.start()

    def beat_killed(self) -> None:
        self.stack.kill("beat")
        time.sleep(OUTAGE_SECONDS)
        self.stack.start("beat")

    def ingress_restart(self) -> None:
        self.stack.stop("public")
        self.stack.start("public")

    def partition(self) -> None:
        network = self.stack.network
        if network is None:
            self.log[-1] = (self.log[-1][0], f"partition skipped ({self.stack.partition_reason})")
            return
        network.cut(PARTITION_HOST)
        try:
            self.stopping.wait(PARTITION_SECONDS)
        finally:
            network.rejoin(PARTITION_HOST)

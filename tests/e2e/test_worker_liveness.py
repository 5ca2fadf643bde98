"""The worker's liveness file: touched from its event loop while it runs, and no longer when the
loop is stuck, so a probe that reads the file's age needs no Python process."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from broker.settings import Settings
from tasks.celery_app import LIVENESS_INTERVAL
from tests.support.runtime import prepare, runtime_env
from tests.support.stack.roster import worker_process
from tests.support.waits import wait_until
from tests.support.workflows import set_output, workflow, write_workflow

pytestmark = [pytest.mark.slow, pytest.mark.redis]


def test_the_worker_touches_its_heartbeat_file_until_its_loop_stops(
    tmp_path: Path, redis_url: str
) -> None:
    # Given a worker on Redis (an event loop drives its timer) with a heartbeat file
    var, flows, beat_file = tmp_path / "var", tmp_path / "wf", tmp_path / "live" / "worker.alive"
    write_workflow(flows, workflow("live", [set_output("o", "r", 1)], request_type="Live"))
    env = runtime_env(
        var,
        database_url=f"sqlite:///{var / 'broker.db'}",
        queue_url=redis_url,
        workflows=flows,
        BROKER_WORKER_HEARTBEAT_FILE=str(beat_file),
    )
    var.mkdir()
    prepare(Settings.from_env(env))[1].stop()
    worker = worker_process(env, tmp_path / "worker.log", beat=False).start()
    try:
        # When it runs, the file appears and is touched again within the interval
        wait_until(beat_file.exists, timeout=60, what="the heartbeat file")
        first = beat_file.stat().st_mtime
        wait_until(
            lambda: beat_file.stat().st_mtime > first,
            timeout=LIVENESS_INTERVAL + 10,
            what="a second touch",
        )
        # When the worker's main process is stopped (a stuck loop)
        worker.proc.send_signal(signal.SIGSTOP)  # type: ignore[union-attr]
        try:
            time.sleep(1)
            stopped_at = beat_file.stat().st_mtime
            time.sleep(LIVENESS_INTERVAL + 3)
            # Then the file ages
            assert beat_file.stat().st_mtime == stopped_at
        finally:
            worker.proc.send_signal(signal.SIGCONT)  # type: ignore[union-attr]
    finally:
        worker.stop()

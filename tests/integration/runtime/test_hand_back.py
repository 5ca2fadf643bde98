"""A step interrupted by its process stopping (the drain) is handed back at once.

Celery cancels a step that outlives ``BROKER_DRAIN_TIMEOUT`` with a signal that billiard turns into
``SystemExit`` in the pool process; the runner then makes the step's outbox row due now and
releases the instance lock, so another worker redoes the step without waiting for the lease or the
lock's TTL. The end-to-end proof with real workers is in tests/chaos (SIGTERM mid-step).
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest

from broker.runtime import ids
from broker.runtime.steps import runner
from broker.runtime.steps import step as steps
from broker.settings import Settings
from broker.store.db import dispose_engines, transaction
from broker.store.models import OutboxRow, OutboxState, utcnow
from tests.support.runtime import (
    drain,
    in_process_runtime,
    request_status,
    runtime_env,
    submit_request,
)
from tests.support.sink import Sink
from tests.support.workflows import sink_workflow, write_workflow


class StoppingEngine:
    """An engine whose step is cut short the way a cancelled pool process's is."""

    def __init__(self, error: BaseException) -> None:
        self.error = error

    def start(self, *args: Any, **kwargs: Any) -> Any:
        raise self.error


@pytest.mark.parametrize("error", [SystemExit(-15), KeyboardInterrupt()], ids=["exit", "ctrl-c"])
def test_a_step_cut_short_hands_its_row_back_and_frees_the_instance(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error: BaseException
) -> None:
    var_dir = tmp_path / "var"
    sink = Sink().__enter__()
    write_workflow(tmp_path / "wf", sink_workflow("cut", "Cut", sink.url("/cut")))
    env = runtime_env(
        var_dir,
        workflows=tmp_path / "wf",
        database_url=f"sqlite:///{var_dir / 'broker.db'}",
        BROKER_OUTBOX_LEASE="600",
        BROKER_LOCK_TTL="600",
    )
    rt = in_process_runtime(Settings.from_env(env), var_dir / "locks")
    try:
        # Given a dispatched request (its row leased for ten minutes)
        request_id = submit_request(rt.factory, rt.registry, "Cut")
        with transaction(rt.factory) as session:
            [row] = session.query(OutboxRow).all()
            row.state = OutboxState.DISPATCHED.value
            row.lease_expires_at = utcnow() + dt.timedelta(minutes=10)
            row_id = row.id
        # When its step is cut short by the process stopping
        real_engine = steps.build_engine
        monkeypatch.setattr(steps, "build_engine", lambda rt, iid: StoppingEngine(error))
        before = utcnow()
        with pytest.raises(type(error)):
            runner.run_request(rt, request_id, row_id)
        # Then the row is pending again and due now, with the reason, not leased for ten minutes
        with transaction(rt.factory, write=False) as session:
            row = session.get(OutboxRow, row_id)
            assert row is not None
            assert row.state == OutboxState.PENDING.value
            assert row.lease_expires_at is None
            assert row.available_at.replace(tzinfo=None) <= utcnow().replace(tzinfo=None)
            assert row.available_at.replace(tzinfo=None) >= before.replace(tzinfo=None)
            assert row.last_error == "worker stopped mid-step"
        # And the instance lock is free at once (its TTL is ten minutes)
        lock = rt.locks.acquire(
            f"instance:{ids.instance_id_for_request(request_id)}", ttl=5, timeout=0
        )
        assert lock is not None
        lock.release()
        # And the next delivery redoes the step and completes the request, with one effect
        monkeypatch.setattr(steps, "build_engine", real_engine)
        drain(rt)
        assert request_status(rt.factory, request_id) == "Completed"
        assert len(sink.keys("/cut")) == 1
    finally:
        sink.__exit__(None, None, None)
        rt.registry.stop()
        dispose_engines()

"""Upgrades while running: nothing in flight is lost, and suspended instances keep their version.

1. A rolling restart onto a new build with a database migration, while requests are in flight:
   the old worker runs on the schema one revision behind; mid-burst the operator runs
   ``broker db upgrade`` (the README's Operations, "Upgrading while running"), starts a worker of
   the new build and stops the old one with SIGTERM (it drains). Every request completes, once.
2. A workflow file changed to a new version while instances of the old one are suspended: they
   finish on the version they started with, and new requests use the new one.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
from alembic.script import ScriptDirectory
from sqlalchemy import func, select

from broker.registry import WorkflowRegistry
from broker.runtime.bookmarks import queue as bookmarks
from broker.settings import Settings
from broker.store import db
from broker.store.db import transaction
from broker.store.models import Bookmark, Request
from broker.wiring.runtime import make_publisher
from tests.chaos.test_chaos_runtime import assert_one_effect_per_request, count_status
from tests.support.runtime import prepare, runtime_env, submit_request
from tests.support.services import PROJECT_ROOT
from tests.support.sink import Sink
from tests.support.stack.process import Process, process_env
from tests.support.stack.roster import worker_process
from tests.support.waits import wait_until
from tests.support.workflows import (
    activity,
    literal,
    set_output,
    sink_workflow,
    workflow,
    write_workflow,
)

pytestmark = [pytest.mark.chaos, pytest.mark.slow, pytest.mark.timeout(300)]

#: seconds between two submissions of the burst (it lasts until the old worker is gone)
SUBMIT_INTERVAL = 0.1


def broker_cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(Path(sys.executable).parent / "broker"), *args],
        cwd=PROJECT_ROOT,
        env=process_env(env),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def previous_revision() -> str:
    script = ScriptDirectory.from_config(db.alembic_config())
    head = script.get_revision(db.head_revision())
    assert head is not None
    assert isinstance(head.down_revision, str), "no single revision before head"
    return head.down_revision


def test_a_rolling_restart_onto_a_migrated_schema_loses_nothing_in_flight(
    tmp_path: Path, postgres_url: str, redis_url: str
) -> None:
    with Sink() as sink:
        sink.delay["/up"] = 0.3
        write_workflow(tmp_path / "wf", sink_workflow("up", "Upgrade", sink.url("/up")))
        env = runtime_env(
            tmp_path / "var",
            workflows=tmp_path / "wf",
            database_url=postgres_url,
            queue_url=redis_url,
            lock_url=redis_url,
            BROKER_DRAIN_TIMEOUT="5",
            REMAP_SIGTERM="SIGQUIT",
        )
        settings = Settings.from_env(env)
        # Given the old build's schema: one revision behind the code's head
        old = previous_revision()
        db.upgrade(postgres_url, old)
        factory = db.make_session_factory(db.make_engine(postgres_url))
        registry = WorkflowRegistry(settings, factory)
        registry.load()
        publisher = make_publisher(settings, factory)
        check = broker_cli(env, "db", "check")
        assert check.returncode == 1, check.stdout + check.stderr  # behind: the upgrade is due
        old_worker = worker_process(env, tmp_path / "old.log", concurrency=2, name="old").start()
        new_worker: Process | None = None
        request_ids: list[str] = []
        stop = threading.Event()

        def submit_burst() -> None:
            n = 0
            while not stop.is_set():
                request_ids.append(
                    submit_request(
                        factory, registry, "Upgrade", payload={"n": n}, publisher=publisher
                    )
                )
                n += 1
                time.sleep(SUBMIT_INTERVAL)

        try:
            submitter = threading.Thread(target=submit_burst, daemon=True)
            submitter.start()
            wait_until(lambda: count_status(factory, "Completed") >= 5, timeout=60, what="progress")
            # When, with requests in flight, the schema is migrated (the new build's first step)
            upgraded = broker_cli(env, "db", "upgrade")
            assert upgraded.returncode == 0, upgraded.stdout + upgraded.stderr
            assert db.current_revision(postgres_url) == db.head_revision()
            # and a worker of the new build starts before the old one is stopped (SIGTERM: it
            # drains its steps and hands back the rest)
            new_worker = worker_process(
                env, tmp_path / "new.log", concurrency=2, name="new"
            ).start()
            wait_until(lambda: "ready" in new_worker.tail(200), timeout=60, what="new worker")
            assert count_status(factory, "Completed") < len(request_ids), "nothing in flight"
            old_worker.terminate()
            assert old_worker.proc is not None
            old_worker.proc.wait(timeout=60)
            time.sleep(2.0)  # a few more submissions to the new build alone
            stop.set()
            submitter.join(60)
            total = len(request_ids)
            # Then every request completes, each effect once
            wait_until(
                lambda: count_status(factory, "Completed") == total,
                timeout=120,
                interval=0.5,
                what="every request to complete after the rolling restart",
            )
        except AssertionError:
            print(old_worker.tail(60))
            if new_worker is not None:
                print(new_worker.tail(60))
            raise
        finally:
            stop.set()
            old_worker.stop()
            if new_worker is not None:
                new_worker.stop()
            registry.stop()
        assert broker_cli(env, "db", "check").returncode == 0
        assert_one_effect_per_request(sink, "/up", request_ids)


def versioned(tag: str) -> dict[str, object]:
    """Request type ``Versioned``: waits for the event ``go``, then outputs ``tag``."""
    return workflow(
        "versioned",
        [
            activity("wait", "Elsa.Event", eventName=literal("go")),
            set_output("out", "version", tag),
        ],
        request_type="Versioned",
    )


def waiting_bookmarks(factory: object) -> int:
    with transaction(factory, write=False) as session:  # type: ignore[arg-type]
        return int(session.scalar(select(func.count()).select_from(Bookmark)) or 0)


def test_suspended_instances_finish_on_their_version_and_new_requests_use_the_new_one(
    tmp_path: Path, postgres_url: str, redis_url: str
) -> None:
    folder = tmp_path / "wf"
    write_workflow(folder, versioned("v1"))
    env = runtime_env(
        tmp_path / "var",
        workflows=folder,
        database_url=postgres_url,
        queue_url=redis_url,
        lock_url=redis_url,
        REMAP_SIGTERM="SIGQUIT",
    )
    settings = Settings.from_env(env)
    factory, registry = prepare(settings)
    publisher = make_publisher(settings, factory)
    worker = worker_process(env, tmp_path / "w1.log", concurrency=2, name="w1").start()
    second: Process | None = None
    try:
        # Given three requests of version 1 suspended on their event
        old = [
            submit_request(factory, registry, "Versioned", payload={"n": n}, publisher=publisher)
            for n in range(3)
        ]
        wait_until(lambda: waiting_bookmarks(factory) == 3, timeout=60, what="3 suspended")
        # When the file changes to version 2 and the workers are restarted onto it
        write_workflow(folder, versioned("v2"))
        registry.load()
        assert not registry.problems, registry.problems
        second = worker_process(env, tmp_path / "w2.log", concurrency=2, name="w2").start()
        worker.stop()
        # and new requests arrive
        new = [
            submit_request(factory, registry, "Versioned", payload={"n": n}, publisher=publisher)
            for n in range(2)
        ]
        wait_until(lambda: waiting_bookmarks(factory) == 5, timeout=60, what="5 suspended")
        # and every one gets its event
        with transaction(factory) as session:
            for request_id in old + new:
                bookmarks.enqueue_stimulus(
                    session,
                    item_id=str(uuid.uuid4()),
                    name="go",
                    payload=None,
                    correlation_id=request_id,
                    client_key="testclient",
                )
        wait_until(
            lambda: count_status(factory, "Completed") == 5, timeout=90, what="all completed"
        )
    except AssertionError:
        print(worker.tail(60))
        if second is not None:
            print(second.tail(60))
        raise
    finally:
        worker.stop()
        if second is not None:
            second.stop()
        registry.stop()
    # Then the old instances finished on version 1 and the new ones ran version 2
    with transaction(factory, write=False) as session:
        rows = {r.id: r for r in session.scalars(select(Request))}
        got = {rid: (rows[rid].definition_version, rows[rid].result) for rid in old + new}
    assert [got[r] for r in old] == [(1, {"version": "v1"})] * 3, got
    assert [got[r] for r in new] == [(2, {"version": "v2"})] * 2, got

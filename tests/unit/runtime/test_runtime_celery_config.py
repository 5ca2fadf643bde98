"""Celery configuration: reliability settings, routes, beat schedule, the atomic filesystem
transport, task adapters and RunTask's allowlist."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
from pathlib import Path
from types import SimpleNamespace

from kombu import Connection

from broker.adapters.transport import celery_config
from broker.adapters.transport.celery_config import create_celery
from broker.adapters.transport.filesystem import FOLDER_OPTIONS, PersistentScheduler
from broker.runtime import ids
from broker.runtime.steps.usertasks import is_callable
from broker.settings import Settings
from tests.support.services import PROJECT_ROOT


def test_the_app_is_configured_for_at_least_once_delivery(settings: Settings) -> None:
    conf = create_celery(settings, set_as_current=False).conf
    assert conf.task_acks_late
    assert conf.task_reject_on_worker_lost
    assert conf.worker_prefetch_multiplier == 1
    assert conf.accept_content == ["json"]
    assert conf.task_serializer == "json"
    assert conf.task_routes["broker.relay_outbox"] == {"queue": "broker.maintenance"}


def test_beat_schedules_every_maintenance_job_from_the_settings(settings: Settings) -> None:
    schedule = celery_config.beat_schedule(settings.replace(outbox_relay_interval=2.5))
    assert {entry["task"] for entry in schedule.values()} == set(celery_config.MAINTENANCE_TASKS)
    assert schedule["relay-outbox"]["schedule"] == dt.timedelta(seconds=2.5)
    assert all(entry["options"]["expires"] >= 5 for entry in schedule.values())


def test_the_filesystem_transport_writes_whole_messages_only(settings: Settings) -> None:
    # Given the embedded default's transport
    app = create_celery(settings, set_as_current=False)
    assert app.conf.broker_transport == celery_config.FILESYSTEM_TRANSPORT
    # When a message is published
    with Connection(
        settings.queue_url,
        transport=app.conf.broker_transport,
        transport_options=app.conf.broker_transport_options,
    ) as conn:
        queue = conn.SimpleQueue("broker.test")
        queue.put({"hello": "world"})
        folder = Path(app.conf.broker_transport_options["data_folder_out"])
        # Then only complete message files are in the folder, and they read back
        names = [p.name for p in folder.iterdir()]
        assert names
        assert all(n.endswith(".broker.test.msg") for n in names)
        assert json.loads((folder / names[0]).read_text())
        assert queue.get(timeout=1).payload == {"hello": "world"}
        queue.close()


def test_derived_ids_are_stable_and_distinct() -> None:
    assert ids.instance_id_for_request("r1") == ids.instance_id_for_request("r1")
    assert ids.instance_id_for_request("r1") != ids.instance_id_for_request("r2")
    assert ids.outbox_id_for("retry", "i", "2") != ids.outbox_id_for("retry", "i", "3")


def fake_task(name: str, module: str) -> SimpleNamespace:
    return SimpleNamespace(name=name, run=SimpleNamespace(__module__=module))


def test_run_task_calls_only_tasks_from_the_listed_modules(settings: Settings) -> None:
    listed = settings.replace(task_modules=("tasks", "acme.jobs"))
    assert is_callable(listed, fake_task("acme.resize", "acme.jobs"))
    assert is_callable(listed, fake_task("acme.resize", "acme.jobs.images"))
    assert not is_callable(listed, fake_task("evil", "acme.jobsx"))
    assert not is_callable(listed, fake_task("os.system", "os"))
    # The broker's own tasks and Celery's built-ins are never callable from a workflow
    assert not is_callable(listed, fake_task("broker.purge", "tasks.maintenance"))
    assert not is_callable(listed, fake_task("celery.chord_unlock", "celery.app.builtins"))


def test_the_transport_is_chosen_by_scheme_in_any_case(settings: Settings) -> None:
    # Given queue URLs whose schemes are written in upper and mixed case
    for url, transport in (
        ("FileSystem://", celery_config.FILESYSTEM_TRANSPORT),
        ("REDIS://127.0.0.1:6379/0", celery_config.REDIS_TRANSPORT),
        ("amqp://guest@127.0.0.1//", None),
    ):
        chosen = dataclasses.replace(settings, queue_url=url)
        # When the Celery app is configured
        app = create_celery(chosen, set_as_current=False)
        # Then the broker's own transport is chosen as for the lower-case scheme
        assert celery_config.transport_class(chosen) == transport
        assert app.conf.broker_url.split("://")[0] == url.split("://")[0].lower()
    options = celery_config.transport_options(
        dataclasses.replace(settings, queue_url="Redis://127.0.0.1:6379/0")
    )
    assert options["visibility_timeout"] == settings.task_visibility_timeout
    filesystem = dataclasses.replace(settings, queue_url="FILESYSTEM:///")
    assert celery_config.broker_url(filesystem) == "filesystem://localhost/"


def test_importing_tasks_creates_nothing_in_the_current_folder(tmp_path: Path) -> None:
    # Given an empty folder and the embedded default's settings, relative to it
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("BROKER_")}  # noqa: TID251
    env["PYTHONPATH"] = str(PROJECT_ROOT)
    # When a process imports the tasks package there (as `celery -A tasks --help` would)
    done = subprocess.run(
        [sys.executable, "-c", "import tasks, tasks.workflow, tasks.maintenance"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    # Then no var folder (no var/queue) was made in it
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_the_queue_folders_are_made_when_a_channel_opens(settings: Settings) -> None:
    # Given a configured app whose folders do not exist yet
    app = create_celery(settings, set_as_current=False)
    folders = [Path(app.conf.broker_transport_options[o]) for o in FOLDER_OPTIONS]
    assert not any(f.exists() for f in folders)
    # When a channel of its transport opens (a worker starting, a publisher's first send)
    with Connection(
        settings.queue_url,
        transport=app.conf.broker_transport,
        transport_options=app.conf.broker_transport_options,
    ) as conn:
        conn.default_channel  # noqa: B018 - opens the channel
        # Then the folders are there
        assert all(f.is_dir() for f in folders)


def test_beat_makes_its_schedules_folder_when_it_opens_it(
    settings: Settings, tmp_path: Path
) -> None:
    app = create_celery(settings.replace(var_dir=str(tmp_path / "fresh-var")), set_as_current=False)
    schedule = Path(app.conf.beat_schedule_filename)
    assert not schedule.parent.exists()
    scheduler = PersistentScheduler(app=app, schedule_filename=str(schedule), lazy=True)
    scheduler.setup_schedule()
    scheduler.close()
    assert schedule.parent.is_dir()


def test_a_redis_command_waits_a_bounded_time_for_its_answer() -> None:
    from broker.adapters.transport.celery_config import (
        REDIS_CONNECT_TIMEOUT,
        REDIS_SOCKET_TIMEOUT,
        transport_options,
    )

    # Given the Redis transport
    settings = Settings.from_env({"BROKER_QUEUE_URL": "redis://127.0.0.1:6379/0"})
    # When its options are built
    options = transport_options(settings)
    # Then a command on a connection whose packets vanish (a partition) fails within seconds,
    # above the one-second blocking reads kombu makes itself
    assert options["socket_timeout"] == REDIS_SOCKET_TIMEOUT
    assert 1.0 < REDIS_SOCKET_TIMEOUT <= 30.0
    assert options["socket_connect_timeout"] == REDIS_CONNECT_TIMEOUT

"""The Celery application's configuration, shared by workers, beat and publishers."""

from __future__ import annotations

import datetime as dt
from typing import Any

from celery import Celery

from broker.backends import parse_backend_url, scheme_family
from broker.names import (
    DEFAULT_QUEUE,
    DELIVER_WEBHOOK,
    FIRE_TIMERS,
    MAINTENANCE_QUEUE,
    MAINTENANCE_TASKS,
    PROCESS_BOOKMARK_QUEUE,
    PURGE,
    RECOVER_STALLED,
    RELAY_OUTBOX,
    STEP_KILL_GRACE,
    STEP_TASKS,
    SYNC_WEBHOOKS,
    SYNC_WEBHOOKS_INTERVAL,
    WEBHOOK_QUEUE,
)
from broker.settings import Settings


def step_time_limits(settings: Settings) -> dict[str, dict[str, float]]:
    """Celery's hard time limit of each step task (prefork pool: the child is killed and replaced).
    The soft limit is the runtime's own watchdog (``broker.runtime.steps.ceiling``), which also
    works when the step is stuck in native code, where a soft-limit signal would wait."""
    limit = settings.step_time_limit + STEP_KILL_GRACE
    return {name: {"time_limit": limit} for name in STEP_TASKS}


#: seconds the pool waits for the result of a process that exited before the job is lost
WORKER_LOST_WAIT = 1.0

#: seconds a Redis command may wait for its answer, and a connection to be made (kombu's own
#: blocking reads, BRPOP's, last 1 s)
REDIS_SOCKET_TIMEOUT = 5.0
REDIS_CONNECT_TIMEOUT = 3.0
#: the schemes whose unacknowledged messages come back after a visibility timeout
VISIBILITY_TRANSPORTS = ("redis", "rediss", "sentinel")


def transport_options(settings: Settings) -> dict[str, Any]:
    """Options for the configured transport (folders for filesystem://, timeouts for Redis)."""
    family = scheme_family(settings.queue_url)
    if family == "filesystem":
        root = settings.var_path / "queue"
        folders = {
            "data_folder_in": root / "messages",
            "data_folder_out": root / "messages",
            "control_folder": root / "control",
            "processed_folder": root / "processed",
        }
        # The folders are made when a channel opens (a worker, a publisher; ``filesystem``), never
        # here: configuring an app, as importing ``tasks`` does, creates nothing on disk.
        # The folder is polled: 0.2 s keeps the embedded default's latency low at little cost.
        return {
            **{k: str(v) for k, v in folders.items()},
            "store_processed": False,
            "polling_interval": 0.2,
        }
    if family in VISIBILITY_TRANSPORTS:
        # An unacknowledged message of a worker that died or was cut off comes back after the
        # visibility timeout, but only when some worker sweeps for it: by default every 100 s
        # (kombu's interval 10 s x throttle 10). Sweep every tenth of the timeout (1 to 10 s).
        visibility = settings.task_visibility_timeout
        return {
            "visibility_timeout": visibility,
            "unacked_restore_interval": max(1.0, min(10.0, visibility / 10)),
            "unacked_restore_throttle": 1,
            # Without them a command on a connection whose packets vanish (Redis cut off by a
            # partition) waits for the kernel to give up, a quarter of an hour: a publish after
            # a commit would hold its caller (the ingress's 202) that long.
            "socket_timeout": REDIS_SOCKET_TIMEOUT,
            "socket_connect_timeout": REDIS_CONNECT_TIMEOUT,
        }
    return {}


def beat_schedule(settings: Settings) -> dict[str, dict[str, Any]]:
    """One beat entry per maintenance job, from the settings' intervals.

    Each tick expires after a few intervals: when no worker consumes for a while, stale ticks are
    dropped instead of piling up (every job catches up on its own next run).
    """

    def entry(task: str, seconds: float) -> dict[str, Any]:
        return {
            "task": task,
            "schedule": dt.timedelta(seconds=seconds),
            "options": {"queue": MAINTENANCE_QUEUE, "expires": max(5.0, seconds * 3)},
        }

    return {
        "relay-outbox": entry(RELAY_OUTBOX, settings.outbox_relay_interval),
        "process-bookmark-queue": entry(PROCESS_BOOKMARK_QUEUE, settings.bookmark_queue_interval),
        "fire-timers": entry(FIRE_TIMERS, settings.timer_interval),
        "recover-stalled": entry(RECOVER_STALLED, settings.recovery_interval),
        "purge": entry(PURGE, settings.purge_interval),
        "sync-webhooks": entry(SYNC_WEBHOOKS, SYNC_WEBHOOKS_INTERVAL),
    }


#: Celery's shelve-backed beat schedule, whose folder is made when beat opens it
PERSISTENT_SCHEDULER = "broker.adapters.transport.filesystem:PersistentScheduler"
#: kombu's filesystem transport, with messages written atomically (``transport.filesystem``)
FILESYSTEM_TRANSPORT = "broker.adapters.transport.filesystem:Transport"
#: kombu's Redis transport, with a worker that reconnects after losing Redis mid-read
#: (``transport.redis_channel``)
REDIS_TRANSPORT = "broker.adapters.transport.redis_channel:Transport"
#: the transport of each queue URL scheme the broker replaces; any other scheme is kombu's own
TRANSPORTS: dict[str, str] = {"filesystem": FILESYSTEM_TRANSPORT, "redis": REDIS_TRANSPORT}


def transport_class(settings: Settings) -> str | None:
    """The broker's own transport for ``BROKER_QUEUE_URL`` (its scheme, in any case), or None."""
    return TRANSPORTS.get(scheme_family(settings.queue_url))


def broker_url(settings: Settings) -> str:
    """The transport URL for Celery. ``filesystem://`` names no host, and kombu warns "No
    hostname was supplied" each time it describes the connection (Flower does, often): the
    folder transport ignores the host, so name the one kombu would fall back to."""
    parsed = parse_backend_url("BROKER_QUEUE_URL", settings.queue_url)
    if parsed.family == "filesystem" and not parsed.location.strip("/"):
        return "filesystem://localhost/"
    return parsed.url


def configure(app: Celery, settings: Settings) -> None:
    """Apply the broker's settings to ``app`` (also used by tests with their own settings)."""
    transport = transport_class(settings)
    if transport is not None:
        app.conf.broker_transport = transport
    app.conf.update(
        broker_url=broker_url(settings),
        broker_transport_options=transport_options(settings),
        broker_connection_retry_on_startup=True,
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        event_serializer="json",
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        task_acks_on_failure_or_timeout=True,
        worker_prefetch_multiplier=1,
        # Results are ignored (a task's outcome is in SQL), so a pool process that exited is
        # known lost after 1 s instead of 10: its prefetch slot (and, for a step the watchdog
        # ended, the hard limit's timer) is released at once (docs/activities.md, time limits).
        worker_lost_wait=WORKER_LOST_WAIT,
        # The drain (``broker.runtime.drain``): a cold shutdown (SIGQUIT, or SIGTERM with
        # Celery's REMAP_SIGTERM=SIGQUIT, which every deploy form sets) stops consuming and lets
        # running steps go on for drain_timeout; what still runs then is interrupted and handed
        # back to the outbox, and prefetched messages go back to the transport. An idle worker
        # stops at once (no ETA messages wait in a worker: timers live in SQL). A plain SIGTERM
        # without the remap is Celery's warm shutdown: running steps finish, unbounded.
        worker_soft_shutdown_timeout=settings.drain_timeout,
        worker_enable_soft_shutdown_on_idle=False,
        task_ignore_result=True,
        task_default_queue=DEFAULT_QUEUE,
        task_create_missing_queues=True,
        task_routes={
            **{name: {"queue": MAINTENANCE_QUEUE} for name in MAINTENANCE_TASKS},
            DELIVER_WEBHOOK: {"queue": WEBHOOK_QUEUE},
        },
        task_annotations=step_time_limits(settings),
        worker_send_task_events=True,
        task_send_sent_event=True,
        worker_hijack_root_logger=False,
        beat_schedule=beat_schedule(settings),
        # beat keeps its schedule file in the var folder, made when beat opens it
        beat_schedule_filename=str(settings.var_path / "celerybeat-schedule"),
        beat_scheduler=PERSISTENT_SCHEDULER,
        timezone="UTC",
        enable_utc=True,
    )


def create_celery(settings: Settings, *, set_as_current: bool = True) -> Celery:
    """A configured Celery app; ``tasks`` registers its task adapters on the one it builds."""
    app = Celery("broker", set_as_current=set_as_current)
    configure(app, settings)
    return app

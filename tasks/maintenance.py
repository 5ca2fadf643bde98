"""Beat jobs (``broker.adapters.transport.celery_config.beat_schedule``): each takes its lock and is
safe to run twice, so two beats running by mistake cause no double effects."""

from __future__ import annotations

from typing import Any

from broker.names import (
    FIRE_TIMERS,
    PROCESS_BOOKMARK_QUEUE,
    PURGE,
    RECOVER_STALLED,
    RELAY_OUTBOX,
)
from broker.runtime.admin import recovery
from broker.runtime.bookmarks import queue as bookmarks
from broker.runtime.outbox import rows as outbox
from broker.wiring.runtime import get_runtime
from tasks.celery_app import maintenance_job, task


@task(name=RELAY_OUTBOX)
@maintenance_job
def relay_outbox() -> dict[str, Any]:
    rt = get_runtime()
    report = outbox.relay(rt.settings, rt.factory, rt.sender, rt.locks)
    return {
        "published": report.published,
        "dead": report.dead,
        "skipped": report.skipped,
        "paused": report.paused,
    }


@task(name=PROCESS_BOOKMARK_QUEUE)
@maintenance_job
def process_bookmark_queue() -> dict[str, Any]:
    report = bookmarks.process_queue(get_runtime())
    return {"matched": report.matched, "expired": report.expired, "failed": report.failed}


@task(name=FIRE_TIMERS)
@maintenance_job
def fire_timers() -> int:
    return bookmarks.fire_timers(get_runtime())


@task(name=RECOVER_STALLED)
@maintenance_job
def recover_stalled() -> int:
    return len(recovery.run_recovery(get_runtime()))


@task(name=PURGE)
@maintenance_job
def purge() -> dict[str, int]:
    report = recovery.purge(get_runtime())
    return {
        "outboxRows": report.outbox_rows,
        "deadLetters": report.dead_letters,
        "files": report.files,
    }

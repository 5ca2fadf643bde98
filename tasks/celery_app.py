"""The Celery application and its reliability settings (DESIGN section 7).

Messages carry ids only and are JSON. The SQL outbox is the source of truth, so the transport may
lose a message without losing work: acks are late, a dead pool child's task is rejected (and
redelivered), one message is prefetched at a time, and nothing waits in the transport with a long
countdown (timers and retries are rows in SQL).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from celery import Celery

from broker.settings import Settings, get_settings

DEFAULT_QUEUE = "broker.default"
MAINTENANCE_QUEUE = "broker.maintenance"


def transport_options(settings: Settings) -> dict[str, Any]:
    """Options for the configured transport (folders for filesystem://, timeouts for Redis)."""
    url = settings.queue_url
    if url.startswith("filesystem://"):
        root = settings.var_path / "queue"
        folders = {
            "data_folder_in": root / "messages",
            "data_folder_out": root / "messages",
            "control_folder": root / "control",
            "processed_folder": root / "processed",
        }
        for folder in folders.values():
            Path(folder).mkdir(parents=True, exist_ok=True)
        return {**{k: str(v) for k, v in folders.items()}, "store_processed": False}
    if url.startswith(("redis://", "rediss://", "sentinel://")):
        return {"visibility_timeout": settings.task_visibility_timeout}
    return {}


def configure(app: Celery, settings: Settings) -> None:
    """Apply the broker's settings to ``app`` (also used by tests with their own settings)."""
    app.conf.update(
        broker_url=settings.queue_url,
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
        task_ignore_result=True,
        task_default_queue=DEFAULT_QUEUE,
        task_create_missing_queues=True,
        worker_send_task_events=True,
        task_send_sent_event=True,
        worker_hijack_root_logger=False,
        beat_schedule_filename=str(settings.var_path / "celerybeat-schedule"),
        timezone="UTC",
        enable_utc=True,
    )


def create_app(settings: Settings | None = None) -> Celery:
    settings = settings or get_settings()
    app = Celery("broker", set_as_current=True)
    configure(app, settings)
    return app

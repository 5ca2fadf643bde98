"""Task adapters of webhooks: one delivery attempt, and the clients.json sync (a beat job)."""

from __future__ import annotations

from broker.names import DELIVER_WEBHOOK, SYNC_WEBHOOKS
from broker.runtime import webhooks
from broker.runtime.webhooks import delivery as webhook_delivery
from broker.store.db import transaction
from broker.wiring.runtime import get_runtime
from tasks.celery_app import maintenance_job, task, workflow_task


@workflow_task(name=DELIVER_WEBHOOK)
def deliver_webhook(delivery_id: str, outbox_id: str | None = None) -> str:
    rt = get_runtime()
    return webhook_delivery.deliver(
        rt.settings, rt.factory, rt.http, delivery_id, outbox_id, locks=rt.locks
    )


@task(name=SYNC_WEBHOOKS)
@maintenance_job
def sync_webhooks() -> int:
    rt = get_runtime()
    with transaction(rt.factory) as session:
        return webhooks.sync_configured(session, rt.clients.clients(), rt.http)

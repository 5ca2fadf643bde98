"""``broker webhooks``: the client's webhook endpoints and their delivery log, over the mTLS API
(the same connection options as ``broker requests``)."""

from __future__ import annotations

from typing import Any

import click

from broker.cli.apiclient import BrokerApi
from broker.cli.ops.connection import api_command
from broker.cli.ops.output import emit, page_of, table


@click.group("webhooks")
def webhooks() -> None:
    """Register, list and remove webhook endpoints; show their delivery log."""


@webhooks.command("list")
@api_command
def webhooks_list(api: BrokerApi, as_json: bool) -> None:
    """This client's endpoints; a disabled one shows why."""
    items = api.webhooks()

    def human() -> None:
        rows = [
            (
                e["id"],
                e["url"],
                ",".join(e["events"]),
                e["source"],
                "yes" if e["enabled"] else f"no: {(e.get('disabled') or {}).get('reason')}",
            )
            for e in items
        ]
        table(rows, ("ID", "URL", "EVENTS", "SOURCE", "ENABLED"))

    emit(page_of(items), as_json, human)


@webhooks.command("add")
@click.argument("endpoint_url", metavar="URL")
@click.option("--event", "events", multiple=True, help="An event to receive (repeatable).")
@click.option("--secret", help="A whsec_ secret to sign with [default: a new one].")
@api_command
def webhooks_add(
    api: BrokerApi,
    as_json: bool,
    endpoint_url: str,
    events: tuple[str, ...],
    secret: str | None,
) -> None:
    """Register URL; prints the signing secret, which is never shown again."""
    endpoint = api.add_webhook(endpoint_url, events or None, secret)
    emit(
        endpoint,
        as_json,
        lambda: click.echo(f"{endpoint['id']}  secret {endpoint['secret']}"),
    )


@webhooks.command("delete")
@click.argument("endpoint_id")
@api_command
def webhooks_delete(api: BrokerApi, as_json: bool, endpoint_id: str) -> None:
    """Remove an endpoint registered through the API."""
    api.delete_webhook(endpoint_id)
    emit({"deleted": endpoint_id}, as_json, lambda: click.echo(f"deleted {endpoint_id}"))


@webhooks.command("rotate-secret")
@click.argument("endpoint_id")
@api_command
def webhooks_rotate(api: BrokerApi, as_json: bool, endpoint_id: str) -> None:
    """A new secret; the previous one still signs for BROKER_WEBHOOK_SECRET_OVERLAP seconds."""
    endpoint = api.rotate_webhook_secret(endpoint_id)
    emit(
        endpoint,
        as_json,
        lambda: click.echo(f"{endpoint['id']}  secret {endpoint['secret']}"),
    )


@webhooks.command("deliveries")
@click.argument("endpoint_id")
@click.option("--limit", type=click.IntRange(1, 500), default=50, show_default=True)
@api_command
def webhooks_deliveries(api: BrokerApi, as_json: bool, endpoint_id: str, limit: int) -> None:
    """The endpoint's last delivery attempts, newest first: status code and latency."""
    items = api.webhook_deliveries(endpoint_id, limit=limit)

    def human() -> None:
        rows: list[tuple[Any, ...]] = [
            (
                a["attemptedAt"],
                a["eventType"],
                a["webhookId"],
                a["attempt"],
                a["statusCode"],
                a["latencyMs"],
                a["outcome"],
                (a.get("error") or "")[:60],
            )
            for a in items
        ]
        table(
            rows,
            ("AT", "EVENT", "WEBHOOK-ID", "TRY", "STATUS", "MS", "OUTCOME", "ERROR"),
        )

    emit(page_of(items, page_size=limit), as_json, human)

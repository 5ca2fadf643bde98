"""``broker instances``: inspect and cancel workflow instances (admin scopes needed)."""

from __future__ import annotations

import click

from broker.cli.apiclient import BrokerApi
from broker.cli.ops.connection import api_command
from broker.cli.ops.output import emit, fields, table

INSTANCE_FIELDS = (
    "id",
    "definitionId",
    "version",
    "requestId",
    "parentId",
    "correlationId",
    "status",
    "subStatus",
    "incidentCount",
    "fault",
    "createdAt",
    "updatedAt",
    "finishedAt",
)


@click.group()
def instances() -> None:
    """Inspect and cancel workflow instances (admin scopes needed)."""


@instances.command("list")
@click.option("--status", metavar="STATUS", help="Running, Finished or a sub-status (Suspended).")
@click.option("--definition-id", metavar="ID", help="Only this workflow definition.")
@click.option("--page", type=click.IntRange(0), default=0, show_default=True)
@click.option("--page-size", type=click.IntRange(1, 500), default=50, show_default=True)
@api_command
def instances_list(
    api: BrokerApi,
    as_json: bool,
    status: str | None,
    definition_id: str | None,
    page: int,
    page_size: int,
) -> None:
    """List workflow instances, newest first."""
    body = api.instances(status=status, definition_id=definition_id, page=page, page_size=page_size)
    emit(
        body,
        as_json,
        lambda: table(
            [
                (
                    i["id"],
                    i["definitionId"],
                    i["version"],
                    i["status"],
                    i["subStatus"],
                    i["requestId"],
                    i["createdAt"],
                )
                for i in body["items"]
            ],
            ("ID", "DEFINITION", "VERSION", "STATUS", "SUB-STATUS", "REQUEST", "CREATED"),
        ),
    )


@instances.command("get")
@click.argument("instance_id")
@click.option("--journal", is_flag=True, help="Also show the execution journal.")
@api_command
def instances_get(api: BrokerApi, as_json: bool, instance_id: str, journal: bool) -> None:
    """Show one workflow instance (exit 3 when it does not exist)."""
    body = api.instance(instance_id)
    entries = api.instance_journal(instance_id) if journal else None
    shown = body if entries is None else {**body, "journal": entries}

    def human() -> None:
        fields(body, INSTANCE_FIELDS)
        if entries is not None:
            click.echo("")
            table(
                [
                    (
                        e["sequence"],
                        e["timestamp"],
                        e["activityId"],
                        e["activityType"],
                        e["eventName"],
                        e.get("outcome"),
                    )
                    for e in entries
                ],
                ("#", "TIME", "ACTIVITY", "TYPE", "EVENT", "OUTCOME"),
            )

    emit(shown, as_json, human)


@instances.command("cancel")
@click.argument("instance_id")
@api_command
def instances_cancel(api: BrokerApi, as_json: bool, instance_id: str) -> None:
    """Cancel a workflow instance and its children (a root instance cancels its request)."""
    body = api.cancel_instance(instance_id)
    emit(body, as_json, lambda: click.echo(f"{body['id']} {body['status']} {body['subStatus']}"))

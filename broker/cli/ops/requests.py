"""``broker requests``: submit, inspect, watch and cancel requests as the certificate's client."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from broker.cli.apiclient import BrokerApi
from broker.cli.ops.connection import EXIT_FAILED, EXIT_TIMEOUT, api_command
from broker.cli.ops.output import emit, fields, page_of, table
from broker.store.models import RequestStatus

WATCH_INTERVAL = 1.0


def parse_keys(values: Sequence[str]) -> dict[str, str]:
    keys: dict[str, str] = {}
    for item in values:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise click.BadParameter(f"expected NAME=VALUE, got {item!r}", param_hint="--key")
        if name in keys:
            raise click.BadParameter(f"key {name!r} given twice", param_hint="--key")
        keys[name] = value
    return keys


def parse_payload(text: str | None) -> dict[str, Any] | None:
    """``--payload``: a JSON object, ``@file`` or ``@-`` (stdin)."""
    if text is None:
        return None
    try:
        if text.startswith("@"):
            source = text[1:]
            text = sys.stdin.read() if source == "-" else Path(source).read_text(encoding="utf-8")
        value = json.loads(text)
    except OSError as exc:
        raise click.BadParameter(f"cannot read {text[1:]}: {exc}", param_hint="--payload") from exc
    except ValueError as exc:
        raise click.BadParameter(f"not valid JSON: {exc}", param_hint="--payload") from exc
    if not isinstance(value, dict):
        raise click.BadParameter("must be a JSON object", param_hint="--payload")
    return value


@click.group()
def requests() -> None:
    """Submit, inspect, watch and cancel requests (as the certificate's client)."""


@requests.command("submit")
@click.argument("request_type")
@click.option(
    "--key", "-k", "keys", multiple=True, metavar="NAME=VALUE", help="A request key (repeat)."
)
@click.option("--payload", metavar="JSON|@FILE", help="Payload: a JSON object, @file or @-.")
@click.option("--idempotency-key", metavar="KEY", help="Makes a retried submission safe.")
@click.option(
    "--quiet", "-q", is_flag=True, help="No note on stderr when the key answered an earlier one."
)
@api_command
def submit_command(
    api: BrokerApi,
    as_json: bool,
    request_type: str,
    keys: tuple[str, ...],
    payload: str | None,
    idempotency_key: str | None,
    quiet: bool,
) -> None:
    """Submit a request of REQUEST_TYPE; prints its correlation id alone, so that
    ID=$(broker requests submit ...) works (--json: the whole answer).

    An idempotent repeat (the same --idempotency-key) prints the first request's id, with a
    note on stderr unless --quiet.
    """
    done = api.submit(request_type, parse_keys(keys), parse_payload(payload), idempotency_key)

    def human() -> None:
        click.echo(done.correlation_id)
        if not done.created and not quiet:
            click.echo(
                f"existing request {done.correlation_id} ({done.status}) for this key", err=True
            )

    emit(done.body, as_json, human)


REQUEST_FIELDS = (
    "correlationId",
    "clientId",
    "requestType",
    "status",
    "keys",
    "result",
    "errorDetail",
    "submittedAt",
    "updatedAt",
    "workflow",
)


@requests.command("get")
@click.argument("request_id")
@api_command
def get_command(api: BrokerApi, as_json: bool, request_id: str) -> None:
    """Show one request (exit 3 when it does not exist)."""
    record = api.get(request_id)
    emit(record, as_json, lambda: fields(record, REQUEST_FIELDS))


@requests.command("list")
@click.option("--status", type=click.Choice([s.value for s in RequestStatus], case_sensitive=False))
@click.option("--type", "request_type", metavar="TYPE", help="Only this request type.")
@click.option("--since", metavar="ISO8601", help="Only requests submitted at or after.")
@click.option(
    "--limit",
    type=click.IntRange(1),
    default=50,
    show_default=True,
    help="Most records to show (fetched over as many pages as needed).",
)
@api_command
def list_command(
    api: BrokerApi,
    as_json: bool,
    status: str | None,
    request_type: str | None,
    since: str | None,
    limit: int,
) -> None:
    """List this client's requests, newest first.

    With --json: {items, totalCount, page, pageSize}, the API's page shape; the API pages by
    cursor, so totalCount counts the records listed (at most --limit) and pageSize is --limit.
    """
    items: list[dict[str, Any]] = []
    pages = api.iter_requests(
        status=status, request_type=request_type, since=since, page_size=min(limit, 500)
    )
    for item in pages:
        items.append(item)
        if len(items) >= limit:
            break
    emit(
        page_of(items, page_size=limit),
        as_json,
        lambda: table(
            [
                (
                    r["correlationId"],
                    r["requestType"],
                    r["status"],
                    (r.get("workflow") or {}).get("subStatus"),
                    r["submittedAt"],
                )
                for r in items
            ],
            ("ID", "TYPE", "STATUS", "SUB-STATUS", "SUBMITTED"),
        ),
    )


@requests.command("events")
@click.argument("request_id")
@api_command
def events_command(api: BrokerApi, as_json: bool, request_id: str) -> None:
    """Show a request's audit history, oldest first."""
    events = api.events(request_id)
    emit(
        page_of(events),
        as_json,
        lambda: table(
            [(e["timestamp"], e["eventType"], e["source"], e.get("message")) for e in events],
            ("TIME", "EVENT", "SOURCE", "MESSAGE"),
        ),
    )


@requests.command("cancel")
@click.argument("request_id")
@api_command
def cancel_command(api: BrokerApi, as_json: bool, request_id: str) -> None:
    """Cancel a request and its workflows (exit 1 when it is already terminal)."""
    body = api.cancel(request_id)
    emit(body, as_json, lambda: click.echo(f"{body['correlationId']} {body['status']}"))


@requests.command("types")
@api_command
def types_command(api: BrokerApi, as_json: bool) -> None:
    """List the request types this client may submit."""
    types = api.request_types()
    emit(
        page_of(types),
        as_json,
        lambda: table(
            [
                (
                    t["requestType"],
                    ",".join(t["requiredKeys"]),
                    (t.get("workflow") or {}).get("version"),
                )
                for t in types
            ],
            ("TYPE", "REQUIRED KEYS", "VERSION"),
        ),
    )


@requests.command("watch")
@click.argument("request_id")
@click.option(
    "--timeout",
    type=click.FloatRange(min=0),
    default=None,
    help="Give up after this many seconds (exit 4) [default: wait forever].",
)
@click.option(
    "--interval",
    type=click.FloatRange(min=0.05),
    default=WATCH_INTERVAL,
    show_default=True,
    help="Seconds between polls.",
)
@api_command
def watch_command(
    api: BrokerApi, as_json: bool, request_id: str, timeout: float | None, interval: float
) -> None:
    """Poll a request until it is terminal, printing each status change.

    Exit 0 on Completed, 1 on Faulted or Cancelled, 3 when it does not exist, 4 on timeout.
    With --json every change is one JSON line (the whole record).
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    seen: tuple[str, str | None] | None = None
    while True:
        record = api.get(request_id)
        state = (str(record["status"]), (record.get("workflow") or {}).get("subStatus"))
        if state != seen:
            seen = state
            if as_json:
                click.echo(json.dumps(record, default=str))
            else:
                sub = f" ({state[1]})" if state[1] else ""
                click.echo(f"{record['updatedAt']} {state[0]}{sub}")
        if RequestStatus(state[0]).terminal:
            if state[0] != RequestStatus.COMPLETED and not as_json and record.get("errorDetail"):
                click.echo(f"error: {record['errorDetail']}", err=True)
            raise click.exceptions.Exit(0 if state[0] == RequestStatus.COMPLETED else EXIT_FAILED)
        if deadline is not None and time.monotonic() >= deadline:
            click.echo(f"timed out: {request_id} is still {state[0]}", err=True)
            raise click.exceptions.Exit(EXIT_TIMEOUT)
        pause = interval if deadline is None else min(interval, deadline - time.monotonic())
        time.sleep(max(pause, 0.0))

"""Operator commands over the public API: ``broker requests``, ``dead-letters``, ``instances``,
``runtime``; and ``broker outbox``, which reads the database directly.

API commands present a client certificate. Without options they use the development defaults:
``--url https://localhost:<port of BROKER_PUBLIC_BIND>``, ``--cert DevClient.pem``,
``--key-file DevClient.key`` (next to the certificate) and ``--ca ca.pem``, all in the folder of
BROKER_TLS_CLIENT_CA (``var/certs``). ``--key`` is taken by request keys (``--key K=V``), so the
private key is ``--key-file``; it defaults to the ``.key`` file beside ``--cert``.

Exit codes scripts can rely on: 0 success, 1 the API or the operation failed, 2 bad usage,
3 not found, 4 ``requests watch`` timed out. ``--json`` prints machine-readable output on stdout
and errors as the server's JSON body on stderr.
"""

from __future__ import annotations

import functools
import json
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import click

from broker.apiclient import DEFAULT_TIMEOUT, ApiClient, default_endpoint, http_status
from broker.errors import BrokerError, Conflict, NotFound, StoreUnavailable
from broker.settings import get_settings
from broker.store.models import RequestStatus

EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_NOT_FOUND = 3
EXIT_TIMEOUT = 4
KINDS = ("request", "outbox", "webhook", "bookmark")
WATCH_INTERVAL = 1.0

F = TypeVar("F", bound=Callable[..., Any])


# Plumbing -----------------------------------------------------------------------------------------


def fail(error: BrokerError, as_json: bool) -> NoReturn:
    """Print the error (the server's body with ``--json``) and exit 3 (not found) or 1."""
    status = http_status(error)
    if as_json:
        click.echo(json.dumps({**error.to_dict(), "status": status}), err=True)
    else:
        extra = {k: v for k, v in error.details.items() if k != "url"}
        suffix = f" {json.dumps(extra)}" if extra else ""
        where = f" (HTTP {status})" if status else ""
        click.echo(f"error{where}: {error.message}{suffix}", err=True)
    raise click.exceptions.Exit(EXIT_NOT_FOUND if isinstance(error, NotFound) else EXIT_FAILED)


def connect(
    url: str | None, cert: str | None, key_file: str | None, ca: str | None, timeout: float
) -> ApiClient:
    """An API client from the options, filling what is missing from the development defaults."""
    defaults = None
    if not (url and cert and ca):
        defaults = default_endpoint(get_settings())
    cert = cert or (defaults.cert if defaults else "")
    if not key_file:
        key_file = (
            defaults.key
            if defaults and cert == defaults.cert
            else str(Path(cert).with_suffix(".key"))
        )
    return ApiClient(
        url or (defaults.url if defaults else ""),
        cert=cert,
        key=key_file,
        ca=ca or (defaults.ca if defaults else ""),
        timeout=timeout,
    )


def api_command(fn: F) -> F:
    """Adds the connection options and ``--json``; passes ``api`` and ``as_json``; maps errors."""

    @functools.wraps(fn)
    def run(
        *,
        url: str | None,
        cert: str | None,
        key_file: str | None,
        ca: str | None,
        http_timeout: float,
        as_json: bool,
        **kwargs: Any,
    ) -> Any:
        try:
            with connect(url, cert, key_file, ca, http_timeout) as api:
                return fn(api=api, as_json=as_json, **kwargs)
        except BrokerError as error:
            fail(error, as_json)

    options = (
        click.option(
            "--url",
            metavar="URL",
            help="Public listener [default: https://localhost:<port of BROKER_PUBLIC_BIND>].",
        ),
        click.option(
            "--cert",
            metavar="PEM",
            help="Client certificate [default: DevClient.pem in the folder of "
            "BROKER_TLS_CLIENT_CA].",
        ),
        click.option(
            "--key-file",
            metavar="PEM",
            help="Client private key [default: the .key file beside --cert].",
        ),
        click.option(
            "--ca",
            metavar="PEM",
            help="CA that signed the server certificate [default: BROKER_TLS_CLIENT_CA].",
        ),
        click.option(
            "--http-timeout",
            type=float,
            default=DEFAULT_TIMEOUT,
            show_default=True,
            help="Seconds one HTTP call may take.",
        ),
        click.option("--json", "as_json", is_flag=True, help="Print JSON (for scripts)."),
    )
    command: Any = run
    for option in reversed(options):
        command = option(command)
    return command  # type: ignore[no-any-return]


def emit(value: Any, as_json: bool, human: Callable[[], None]) -> None:
    if as_json:
        click.echo(json.dumps(value, indent=2, default=str))
    else:
        human()


def table(rows: Sequence[Sequence[Any]], headers: Sequence[str]) -> None:
    """A plain aligned table (scripts use ``--json``; this is for eyes)."""
    cells = [[("" if v is None else str(v)) for v in row] for row in rows]
    widths = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(headers)]
    for line in (list(headers), *cells):
        click.echo("  ".join(v.ljust(w) for v, w in zip(line, widths, strict=True)).rstrip())


def fields(record: dict[str, Any], names: Iterable[str]) -> None:
    width = max(len(n) for n in names)
    for name in names:
        value = record.get(name)
        shown = json.dumps(value) if isinstance(value, dict | list) else value
        click.echo(f"{name.ljust(width)}  {'' if shown is None else shown}")


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


# broker requests ----------------------------------------------------------------------------------


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
@api_command
def submit_command(
    api: ApiClient,
    as_json: bool,
    request_type: str,
    keys: tuple[str, ...],
    payload: str | None,
    idempotency_key: str | None,
) -> None:
    """Submit a request of REQUEST_TYPE; prints its correlation id."""
    done = api.submit(request_type, parse_keys(keys), parse_payload(payload), idempotency_key)
    emit(
        done.body,
        as_json,
        lambda: click.echo(
            f"{'accepted' if done.created else 'existing'} {done.correlation_id} {done.status}"
        ),
    )


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
def get_command(api: ApiClient, as_json: bool, request_id: str) -> None:
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
    api: ApiClient,
    as_json: bool,
    status: str | None,
    request_type: str | None,
    since: str | None,
    limit: int,
) -> None:
    """List this client's requests, newest first."""
    items: list[dict[str, Any]] = []
    pages = api.iter_requests(
        status=status, request_type=request_type, since=since, page_size=min(limit, 500)
    )
    for item in pages:
        items.append(item)
        if len(items) >= limit:
            break
    emit(
        items,
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
def events_command(api: ApiClient, as_json: bool, request_id: str) -> None:
    """Show a request's audit history, oldest first."""
    events = api.events(request_id)
    emit(
        events,
        as_json,
        lambda: table(
            [(e["timestamp"], e["eventType"], e["source"], e.get("message")) for e in events],
            ("TIME", "EVENT", "SOURCE", "MESSAGE"),
        ),
    )


@requests.command("cancel")
@click.argument("request_id")
@api_command
def cancel_command(api: ApiClient, as_json: bool, request_id: str) -> None:
    """Cancel a request and its workflows (exit 1 when it is already terminal)."""
    body = api.cancel(request_id)
    emit(body, as_json, lambda: click.echo(f"{body['correlationId']} {body['status']}"))


@requests.command("types")
@api_command
def types_command(api: ApiClient, as_json: bool) -> None:
    """List the request types this client may submit."""
    types = api.request_types()
    emit(
        types,
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
    api: ApiClient, as_json: bool, request_id: str, timeout: float | None, interval: float
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


# broker dead-letters ------------------------------------------------------------------------------

KIND_OPTION = click.option(
    "--kind",
    type=click.Choice(KINDS, case_sensitive=False),
    help="request, outbox, webhook or bookmark [default: request, outbox and webhook].",
)
LETTER_HEADERS = (
    "ID",
    "KIND",
    "REASON",
    "REQUEST",
    "INSTANCE",
    "ATTEMPTS",
    "REPLAYABLE",
    "CREATED",
    "ERROR",
)


def _letter_row(letter: dict[str, Any]) -> tuple[Any, ...]:
    error = (letter.get("error") or "").splitlines()
    return (
        letter["id"],
        letter["kind"],
        letter["reason"],
        letter.get("requestId"),
        letter.get("workflowInstanceId"),
        letter.get("attempts"),
        letter.get("replayable"),
        letter.get("createdAt"),
        error[0][:60] if error else "",
    )


@click.group("dead-letters")
def dead_letters() -> None:
    """List, replay and delete dead letters (admin scopes needed)."""


@dead_letters.command("list")
@KIND_OPTION
@click.option("--page", type=click.IntRange(0), default=0, show_default=True)
@click.option("--page-size", type=click.IntRange(1, 500), default=50, show_default=True)
@click.option("--all", "every", is_flag=True, help="Every page, not just one.")
@api_command
def letters_list(
    api: ApiClient, as_json: bool, kind: str | None, page: int, page_size: int, every: bool
) -> None:
    """List dead letters, newest first (views never show payloads)."""
    if every:
        items = list(api.iter_dead_letters(kind))
        body: Any = {"items": items, "totalCount": len(items)}
    else:
        body = api.dead_letters(kind, page=page, page_size=page_size)
        items = body["items"]
    emit(body, as_json, lambda: table([_letter_row(x) for x in items], LETTER_HEADERS))


@dead_letters.command("get")
@click.argument("letter_id")
@KIND_OPTION
@api_command
def letters_get(api: ApiClient, as_json: bool, letter_id: str, kind: str | None) -> None:
    """Show one dead letter."""
    letter = api.dead_letter(letter_id, kind or "request")
    emit(letter, as_json, lambda: fields(letter, list(letter)))


@dead_letters.command("replay")
@click.argument("letter_id", required=False)
@KIND_OPTION
@click.option("--all", "every", is_flag=True, help="Replay every replayable letter of --kind.")
@api_command
def letters_replay(
    api: ApiClient, as_json: bool, letter_id: str | None, kind: str | None, every: bool
) -> None:
    """Replay LETTER_ID, or with --all --kind K every replayable letter of that kind."""
    if every == (letter_id is not None):
        raise click.UsageError("give either LETTER_ID or --all")
    if letter_id is not None:
        body = api.replay_dead_letter(letter_id, kind or "request")
        emit(
            body,
            as_json,
            lambda: click.echo(
                f"replayed {letter_id} as {body.get('queueItemId')}: {body.get('reason')}"
            ),
        )
        return
    if kind is None:
        raise click.UsageError("--all needs --kind (request, outbox, webhook or bookmark)")
    summary = replay_all(api, kind)
    emit(
        summary,
        as_json,
        lambda: click.echo(
            f"replayed {len(summary['replayed'])}, skipped {len(summary['skipped'])}, "
            f"failed {len(summary['failed'])}"
        ),
    )
    if summary["failed"]:
        raise click.exceptions.Exit(EXIT_FAILED)


def replay_all(api: ApiClient, kind: str) -> dict[str, list[Any]]:
    """Replay every replayable letter of ``kind`` with a progress bar on stderr.

    The list is read first and replayed after, so letters written meanwhile wait for the next
    run; one another operator replayed first is skipped, not failed.
    """
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    letters = [x for x in api.iter_dead_letters(kind) if x.get("replayable")]
    summary: dict[str, list[Any]] = {"replayed": [], "skipped": [], "failed": []}
    progress = Progress(
        TextColumn("replaying {task.fields[kind]}"),
        BarColumn(),
        MofNCompleteColumn(),
        console=Console(stderr=True),
    )
    with progress:
        task = progress.add_task("replay", total=len(letters), kind=kind)
        for letter in letters:
            try:
                api.replay_dead_letter(letter["id"], kind)
                summary["replayed"].append(letter["id"])
            except (Conflict, NotFound):
                summary["skipped"].append(letter["id"])
            except BrokerError as error:
                summary["failed"].append({"id": letter["id"], "error": error.message})
            progress.advance(task)
    return summary


@dead_letters.command("delete")
@click.argument("letter_id")
@api_command
def letters_delete(api: ApiClient, as_json: bool, letter_id: str) -> None:
    """Delete a bookmark-queue dead letter."""
    api.delete_dead_letter(letter_id)
    emit({"deleted": letter_id}, as_json, lambda: click.echo(f"deleted {letter_id}"))


# broker instances ---------------------------------------------------------------------------------

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
    api: ApiClient,
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
def instances_get(api: ApiClient, as_json: bool, instance_id: str, journal: bool) -> None:
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
def instances_cancel(api: ApiClient, as_json: bool, instance_id: str) -> None:
    """Cancel a workflow instance and its children (a root instance cancels its request)."""
    body = api.cancel_instance(instance_id)
    emit(body, as_json, lambda: click.echo(f"{body['id']} {body['status']} {body['subStatus']}"))


# broker runtime -----------------------------------------------------------------------------------


@click.group()
def runtime() -> None:
    """Show, pause and resume the workflow runtime (admin scopes needed)."""


def _runtime_line(body: dict[str, Any]) -> None:
    since = f" since {body['updatedAt']}" if body.get("updatedAt") else ""
    click.echo(f"{'paused' if body['paused'] else 'running'}{since}")


@runtime.command("status")
@api_command
def runtime_status(api: ApiClient, as_json: bool) -> None:
    """Whether the runtime is paused."""
    body = api.runtime_status()
    emit(body, as_json, lambda: _runtime_line(body))


@runtime.command("pause")
@api_command
def runtime_pause(api: ApiClient, as_json: bool) -> None:
    """Pause the runtime: workers stop taking new work."""
    body = api.pause()
    emit(body, as_json, lambda: _runtime_line(body))


@runtime.command("resume")
@api_command
def runtime_resume(api: ApiClient, as_json: bool) -> None:
    """Resume a paused runtime."""
    body = api.resume()
    emit(body, as_json, lambda: _runtime_line(body))


# broker outbox ------------------------------------------------------------------------------------


@click.group()
def outbox() -> None:
    """Inspect the transactional outbox (reads the database directly)."""


@outbox.command("status")
@click.option("--database-url", metavar="URL", help="[default: BROKER_DATABASE_URL]")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (for scripts).")
def outbox_status(database_url: str | None, as_json: bool) -> None:
    """Outbox rows by state, the oldest pending row's age, queue depth and dead letters."""
    from sqlalchemy import exc

    from broker.metrics import read_backlog
    from broker.store import db

    url = database_url or get_settings().database_url
    try:
        factory = db.make_session_factory(db.make_engine(url))
        with db.transaction(factory, write=False) as session:
            backlog = read_backlog(session)
    except StoreUnavailable as error:
        fail(error, as_json)
    except exc.SQLAlchemyError as error:
        reason = str(error).splitlines()[0]
        fail(
            StoreUnavailable(f"cannot read the outbox (run `broker db upgrade`?): {reason}"),
            as_json,
        )

    def human() -> None:
        rows: list[tuple[str, object]] = list(backlog.outbox.items())
        rows = [(f"outbox {state}", count) for state, count in rows]
        rows += [
            ("oldest pending age (s)", f"{backlog.oldest_pending_age:.1f}"),
            ("bookmark queue waiting", backlog.bookmark_queue_depth),
            ("bookmark queue delivered", backlog.bookmark_queue_delivered),
        ]
        rows += [(f"dead letters {k}", n) for k, n in sorted(backlog.dead_letters.items())]
        table(rows, ("WHAT", "COUNT"))

    emit(backlog.to_dict(), as_json, human)

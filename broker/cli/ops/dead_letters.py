"""``broker dead-letters``: list, replay and delete dead letters (admin scopes needed)."""

from __future__ import annotations

from typing import Any

import click

from broker.cli.apiclient import BrokerApi
from broker.cli.ops.connection import EXIT_FAILED, api_command
from broker.cli.ops.output import emit, fields, page_of, table
from broker.errors import BrokerError, Conflict, NotFound

KINDS = ("request", "outbox", "webhook", "bookmark")

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
    api: BrokerApi, as_json: bool, kind: str | None, page: int, page_size: int, every: bool
) -> None:
    """List dead letters, newest first (views never show payloads)."""
    if every:
        items = list(api.iter_dead_letters(kind))
        body: Any = page_of(items)
    else:
        body = api.dead_letters(kind, page=page, page_size=page_size)
        items = body["items"]
    emit(body, as_json, lambda: table([_letter_row(x) for x in items], LETTER_HEADERS))


@dead_letters.command("get")
@click.argument("letter_id")
@KIND_OPTION
@api_command
def letters_get(api: BrokerApi, as_json: bool, letter_id: str, kind: str | None) -> None:
    """Show one dead letter."""
    letter = api.dead_letter(letter_id, kind or "request")
    emit(letter, as_json, lambda: fields(letter, list(letter)))


@dead_letters.command("replay")
@click.argument("letter_id", required=False)
@KIND_OPTION
@click.option("--all", "every", is_flag=True, help="Replay every replayable letter of --kind.")
@api_command
def letters_replay(
    api: BrokerApi, as_json: bool, letter_id: str | None, kind: str | None, every: bool
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


def replay_all(api: BrokerApi, kind: str) -> dict[str, list[Any]]:
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
def letters_delete(api: BrokerApi, as_json: bool, letter_id: str) -> None:
    """Delete a bookmark-queue dead letter."""
    api.delete_dead_letter(letter_id)
    emit({"deleted": letter_id}, as_json, lambda: click.echo(f"deleted {letter_id}"))

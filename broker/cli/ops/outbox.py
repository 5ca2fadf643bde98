"""``broker outbox``: the transactional outbox's counts, read from the database directly (not over
the API).
"""

from __future__ import annotations

import click

from broker.cli.ops.connection import fail
from broker.cli.ops.output import emit, table
from broker.errors import StoreUnavailable


@click.group()
def outbox() -> None:
    """Inspect the transactional outbox (reads the database directly)."""


@outbox.command("status")
@click.option("--database-url", metavar="URL", help="[default: BROKER_DATABASE_URL]")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (for scripts).")
def outbox_status(database_url: str | None, as_json: bool) -> None:
    """Outbox rows by state, the oldest pending row's age, queue depth and dead letters."""
    from sqlalchemy import exc

    from broker.store import db
    from broker.telemetry.metrics import read_backlog
    from broker.wiring import cli as cli_wiring

    try:
        factory = cli_wiring.session_factory(database_url)
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

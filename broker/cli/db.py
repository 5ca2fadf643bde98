"""``broker db``: migrate the database and check its revision.

Exit codes: 0 success, 1 the database is unreachable or (``check``) not at the newest revision.
"""

from __future__ import annotations

import click

from broker.errors import StoreUnavailable
from broker.settings import get_settings
from broker.store import db as store
from broker.store import urls

URL_OPTION = click.option(
    "--url",
    metavar="URL",
    default=None,
    help="Database URL (default: BROKER_DATABASE_URL).",
)


def _url(url: str | None) -> str:
    return url if url else get_settings().database_url


def _shown(url: str) -> str:
    # Never print a password an operator put into the URL.
    return urls.normalize_url(url).render_as_string(hide_password=True)


@click.group()
def db() -> None:
    """Migrate and inspect the database."""


@db.command()
@URL_OPTION
@click.option("--revision", default="head", show_default=True, help="Target revision.")
def upgrade(url: str | None, revision: str) -> None:
    """Migrate the database to the newest revision (does nothing when it is already there)."""
    target = _url(url)
    try:
        before = store.current_revision(target)
        store.upgrade(target, revision)
        after = store.current_revision(target)
    except StoreUnavailable as exc:
        raise click.ClickException(f"{exc.message}: {exc.details.get('reason', '')}") from exc
    if before == after:
        click.echo(f"{_shown(target)} is already at revision {after}")
    else:
        click.echo(f"{_shown(target)} migrated from {before or 'empty'} to revision {after}")


@db.command()
@URL_OPTION
def current(url: str | None) -> None:
    """Print the database's revision ("none" when it was never migrated)."""
    target = _url(url)
    try:
        revision = store.current_revision(target)
    except StoreUnavailable as exc:
        raise click.ClickException(f"{exc.message}: {exc.details.get('reason', '')}") from exc
    click.echo(revision or "none")


@db.command()
@URL_OPTION
def check(url: str | None) -> None:
    """Exit 1 unless the database is at the newest revision."""
    target = _url(url)
    try:
        revision = store.current_revision(target)
    except StoreUnavailable as exc:
        raise click.ClickException(f"{exc.message}: {exc.details.get('reason', '')}") from exc
    head = store.head_revision()
    if revision != head:
        click.echo(f"database is at {revision or 'none'}, the code needs {head}", err=True)
        raise SystemExit(1)
    click.echo(f"database is at the newest revision {head}")

"""``broker console``: API keys, console users and Studio's files."""

from __future__ import annotations

import json
import subprocess

import click
from sqlalchemy.orm import Session, sessionmaker

from broker.console import assets
from broker.errors import BadRequest, BrokerError, Conflict, NotFound
from broker.settings import get_settings
from broker.store import credentials, operator_actions
from broker.store import db as store
from broker.wiring import cli as cli_wiring

ROLE_OPTION = click.option(
    "--role",
    type=click.Choice(credentials.ROLES),
    required=True,
    help="viewer reads; designer also saves and publishes; operator also cancels, replays, pauses.",
)
JSON_OPTION = click.option("--json", "as_json", is_flag=True, help="Print JSON.")


def _factory() -> sessionmaker[Session]:
    return cli_wiring.session_factory(upgrade=True)


def _fail(error: BrokerError) -> None:
    click.echo(f"error: {error.message}", err=True)
    raise SystemExit(3 if isinstance(error, NotFound) else 1)


@click.group()
def console() -> None:
    """API keys, users and Studio's files of the console listener."""


@console.group()
def keys() -> None:
    """Create, list and revoke API keys (Authorization: ApiKey <key>)."""


@keys.command("create")
@click.argument("name")
@ROLE_OPTION
@JSON_OPTION
def keys_create(name: str, role: str, as_json: bool) -> None:
    """Create an API key and print it (the only time it is shown; only its hash is kept)."""
    try:
        with store.transaction(_factory()) as db:
            key = credentials.create_key(db, name, role)
            _audit(db, "key.create", name, {"role": role})
    except (BadRequest, Conflict) as exc:
        _fail(exc)
        return
    if as_json:
        click.echo(json.dumps({"name": name, "role": role, "key": key}))
    else:
        click.echo(key)
        click.echo(f"API key {name} ({role}) created; it is not shown again.", err=True)


@keys.command("list")
@JSON_OPTION
def keys_list(as_json: bool) -> None:
    """List API keys by name and role (never the keys)."""
    _list(credentials.KEY, as_json)


@keys.command("revoke")
@click.argument("name")
def keys_revoke(name: str) -> None:
    """Revoke an API key by name; tokens issued for it stop working too."""
    _remove(credentials.KEY, name, "key.revoke")
    click.echo(f"API key {name} revoked")


@console.group()
def users() -> None:
    """Add, list and remove console users (sign-in form and identity/login)."""


@users.command("add")
@click.argument("name")
@ROLE_OPTION
@click.password_option(
    "--password",
    envvar=None,
    help="The password (asked when omitted; at least 12 characters).",
)
def users_add(name: str, role: str, password: str) -> None:
    """Add a console user; only a salted scrypt hash of the password is kept."""
    try:
        with store.transaction(_factory()) as db:
            credentials.add_user(db, name, role, password)
            _audit(db, "user.add", name, {"role": role})
    except (BadRequest, Conflict) as exc:
        _fail(exc)
        return
    click.echo(f"user {name} ({role}) added")


@users.command("list")
@JSON_OPTION
def users_list(as_json: bool) -> None:
    """List console users by name and role."""
    _list(credentials.USER, as_json)


@users.command("remove")
@click.argument("name")
def users_remove(name: str) -> None:
    """Remove a console user; their sessions and tokens stop working."""
    _remove(credentials.USER, name, "user.remove")
    click.echo(f"user {name} removed")


def _list(kind: str, as_json: bool) -> None:
    with store.transaction(_factory(), write=False) as db:
        found = credentials.list_all(db, kind)
    if as_json:
        rows = [{"name": c.name, "role": c.role, "createdAt": c.created_at} for c in found]
        # every list the CLI prints as JSON has the API's page shape
        page = {"items": rows, "totalCount": len(rows), "page": 0, "pageSize": len(rows)}
        click.echo(json.dumps(page, default=str))
        return
    for c in found:
        click.echo(f"{c.name}\t{c.role}\t{c.created_at}")


def _remove(kind: str, name: str, action: str) -> None:
    try:
        with store.transaction(_factory()) as db:
            credentials.remove(db, kind, name)
            _audit(db, action, name)
    except NotFound as exc:
        _fail(exc)


def _audit(db: Session, action: str, name: str, summary: dict[str, str] | None = None) -> None:
    """The operator audit's record of a credential change made from this command line."""
    operator_actions.record(
        db, actor=operator_actions.cli_actor("console"), action=action, target=name, summary=summary
    )


@console.command("assets")
@click.option("--check", is_flag=True, help="Only report whether the files are installed.")
def assets_command(check: bool) -> None:
    """Install Elsa Studio and mermaid.js for the console (npm pack, integrity checked)."""
    settings = get_settings()
    for package in assets.PACKAGES:
        if check:
            state = "installed" if assets.installed(settings, package) else "missing"
            click.echo(f"{package.spec}: {state} ({assets.folder(settings, package)})")
            continue
        if assets.installed(settings, package):
            continue
        try:
            done = assets.install(settings, package)
        except (subprocess.SubprocessError, OSError) as exc:
            raise click.ClickException(f"npm pack {package.spec} failed: {exc}") from exc
        except assets.IntegrityError as exc:
            raise click.ClickException(exc.message) from exc
        if not done:
            click.echo(
                f"npm not found: {package.spec} not installed; {assets.INSTALL_HINT}", err=True
            )
            return
        click.echo(f"{package.spec}: installed ({assets.folder(settings, package)})")

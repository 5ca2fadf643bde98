"""``broker certs``: the development CA, the server certificate and client certificates."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import click

from broker.clients.certificates import (
    fingerprint_sha256,
    init_ca,
    issue_client,
    issue_server,
    register_dev_client,
    thumbprint,
)
from broker.clients.scopes import ADMIN_SCOPES
from broker.settings import get_settings
from broker.wiring import cli as cli_wiring


def _default_folder() -> Path:
    return Path(get_settings().tls_client_ca).parent


_folder_option = click.option(
    "--dir",
    "folder",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="certificate folder (default: the folder of BROKER_TLS_CLIENT_CA)",
)


@click.group()
def certs() -> None:
    """Create the development CA, the server certificate and client certificates."""


@certs.command("init")
@_folder_option
@click.option("--force", is_flag=True, help="replace an existing CA (invalidates issued certs)")
def init_command(folder: Path | None, force: bool) -> None:
    """Create the CA (ca.pem, ca.key); an existing one is kept unless --force."""
    folder = folder or _default_folder()
    existed = (folder / "ca.pem").exists() and (folder / "ca.key").exists()
    path = init_ca(folder, force=force)
    click.echo(f"{'kept' if existed and not force else 'created'} {path}")


@certs.command("server")
@click.argument("host")
@_folder_option
def server_command(host: str, folder: Path | None) -> None:
    """Issue server.pem/server.key for HOST (plus localhost, 127.0.0.1, ::1)."""
    path = issue_server(folder or _default_folder(), host)
    click.echo(f"created {path}")


@certs.command("client")
@click.argument("client_id")
@_folder_option
@click.option("--register", is_flag=True, help="allowlist the certificate in the database")
@click.option(
    "--scope",
    "--scopes",
    "scopes",
    multiple=True,
    help="an admin scope to grant on --register (repeat, or comma-separate); none by default",
)
def client_command(
    client_id: str, folder: Path | None, register: bool, scopes: Sequence[str]
) -> None:
    """Issue CLIENT_ID.pem/CLIENT_ID.key and print its thumbprint."""
    granted = sorted({s.strip() for item in scopes for s in item.split(",") if s.strip()})
    unknown = [s for s in granted if s not in ADMIN_SCOPES]
    if unknown:
        raise click.BadParameter(
            f"unknown scope {', '.join(unknown)}; the scopes are {', '.join(ADMIN_SCOPES)}",
            param_hint="--scope",
        )
    if granted and not register:
        raise click.BadParameter("scopes are granted on --register only", param_hint="--scope")
    path = issue_client(folder or _default_folder(), client_id)
    click.echo(f"created {path}")
    click.echo(f"thumbprint {thumbprint(path)}")
    click.echo(f"sha256 {fingerprint_sha256(path)}")
    if register:
        register_dev_client(cli_wiring.client_registry(), path, client_id, scopes=granted)
        click.echo(f"registered {client_id} with scopes: {', '.join(granted) or 'none'}")


@certs.command("thumbprint")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
def thumbprint_command(file: Path) -> None:
    """Print the SHA-1 thumbprint of a PEM certificate (as elsa-broker prints it)."""
    click.echo(thumbprint(file))


@certs.command("clients")
def clients_command() -> None:
    """List the allowlisted clients (files and database) and the refused database rows."""
    from broker.wiring import cli as cli_wiring

    registry = cli_wiring.client_registry()
    for c in sorted(registry.clients(), key=lambda c: c.client_id.lower()):
        click.echo(
            f"{c.client_id}\tthumbprint {c.thumbprint or '-'}\tsha256 {c.fingerprint_sha256 or '-'}"
        )
    for problem in registry.problems:
        click.echo(f"{problem.client_id}\tREFUSED: {problem.reason}", err=True)
    raise SystemExit(1 if registry.problems else 0)

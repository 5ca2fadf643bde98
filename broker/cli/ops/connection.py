"""The API commands' connection: the options every one takes, the client they open, and how an
API error becomes a message and an exit code.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import click

from broker.cli import profile
from broker.cli.apiclient import DEFAULT_TIMEOUT, BrokerApi, Endpoint, default_endpoint, http_status
from broker.errors import BrokerError, NotFound
from broker.settings import get_settings

EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_NOT_FOUND = 3
EXIT_TIMEOUT = 4

F = TypeVar("F", bound=Callable[..., Any])


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
    url: str | None,
    cert: str | None,
    key_file: str | None,
    ca: str | None,
    timeout: float,
    profile_path: str | None = None,
) -> BrokerApi:
    """An API client from the options, filling what is missing from the profile ``broker run``
    wrote (``--profile``, ``BROKER_PROFILE``, ``var/cli-profile.json``), else from the
    development defaults of the settings."""
    defaults = None
    if not (url and cert and ca):
        defaults = default_connection(profile_path)
    cert = cert or (defaults.cert if defaults else "")
    if not key_file:
        key_file = (
            defaults.key
            if defaults and cert == defaults.cert
            else str(Path(cert).with_suffix(".key"))
        )
    return BrokerApi(
        url or (defaults.url if defaults else ""),
        cert=cert,
        key=key_file,
        ca=ca or (defaults.ca if defaults else ""),
        timeout=timeout,
    )


def default_connection(profile_path: str | None = None) -> Endpoint:
    """The profile's connection when there is one, else the settings' development defaults."""
    if profile_path is None:
        root = click.get_current_context(silent=True)
        profile_path = root.find_root().meta.get(profile.CONTEXT_KEY) if root else None
    settings = get_settings()
    found = profile.find(settings, profile_path)
    if found is None:
        return default_endpoint(settings)
    return Endpoint(url=found.url, cert=found.cert, key=found.key, ca=found.ca)


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
        profile_path: str | None,
        **kwargs: Any,
    ) -> Any:
        try:
            with connect(url, cert, key_file, ca, http_timeout, profile_path) as api:
                return fn(api=api, as_json=as_json, **kwargs)
        except BrokerError as error:
            fail(error, as_json)

    options = (
        click.option(
            "--profile",
            "profile_path",
            metavar="FILE",
            help="Client profile [default: BROKER_PROFILE, else var/cli-profile.json, which "
            "`broker run` writes].",
        ),
        click.option(
            "--url",
            metavar="URL",
            help="Public listener [default: the profile's, else "
            "https://localhost:<port of BROKER_PUBLIC_BIND>].",
        ),
        click.option(
            "--cert",
            metavar="PEM",
            help="Client certificate [default: the profile's, else DevClient.pem in the "
            "folder of BROKER_TLS_CLIENT_CA].",
        ),
        click.option(
            "--key-file",
            metavar="PEM",
            help="Client private key [default: the .key file beside --cert].",
        ),
        click.option(
            "--ca",
            metavar="PEM",
            help="CA that signed the server certificate [default: the profile's, else "
            "BROKER_TLS_CLIENT_CA].",
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

"""``broker runtime``: show, pause and resume the workflow runtime (admin scopes needed)."""

from __future__ import annotations

from typing import Any

import click

from broker.cli.apiclient import BrokerApi
from broker.cli.ops.connection import api_command
from broker.cli.ops.output import emit


@click.group()
def runtime() -> None:
    """Show, pause and resume the workflow runtime (admin scopes needed)."""


def _runtime_line(body: dict[str, Any]) -> None:
    since = f" since {body['updatedAt']}" if body.get("updatedAt") else ""
    click.echo(f"{'paused' if body['paused'] else 'running'}{since}")


@runtime.command("status")
@api_command
def runtime_status(api: BrokerApi, as_json: bool) -> None:
    """Whether the runtime is paused."""
    body = api.runtime_status()
    emit(body, as_json, lambda: _runtime_line(body))


@runtime.command("pause")
@api_command
def runtime_pause(api: BrokerApi, as_json: bool) -> None:
    """Pause the runtime: workers stop taking new work."""
    body = api.pause()
    emit(body, as_json, lambda: _runtime_line(body))


@runtime.command("resume")
@api_command
def runtime_resume(api: BrokerApi, as_json: bool) -> None:
    """Resume a paused runtime."""
    body = api.resume()
    emit(body, as_json, lambda: _runtime_line(body))

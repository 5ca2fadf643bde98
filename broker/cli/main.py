"""The ``broker`` command: the operator's command line (docs/design.md, section 1)."""

from __future__ import annotations

import importlib
import sys
from typing import Any

import click

from broker import __version__

LAZY_COMMANDS = {
    "db": ("broker.cli.db", "db", "Migrate and inspect the database."),
    "certs": (
        "broker.cli.certs",
        "certs",
        "Create the dev CA, server and client certificates.",
    ),
    "workflows": (
        "broker.cli.workflows",
        "workflows",
        "List, validate and draw workflows.",
    ),
    "run": (
        "broker.cli.supervise",
        "run",
        "Start ingress, internal, console, worker and beat together.",
    ),
    "requests": (
        "broker.cli.ops",
        "requests",
        "Submit, inspect, watch and cancel requests.",
    ),
    "dead-letters": (
        "broker.cli.ops",
        "dead_letters",
        "List, replay and delete dead letters.",
    ),
    "instances": (
        "broker.cli.ops",
        "instances",
        "Inspect and cancel workflow instances.",
    ),
    "runtime": (
        "broker.cli.ops",
        "runtime",
        "Show, pause and resume the workflow runtime.",
    ),
    "outbox": (
        "broker.cli.ops",
        "outbox",
        "Outbox, queue and dead-letter counts.",
    ),
    "webhooks": (
        "broker.cli.webhooks",
        "webhooks",
        "Webhook endpoints and their delivery log.",
    ),
    "console": (
        "broker.cli.console",
        "console",
        "API keys, users and Studio's files of the console.",
    ),
    "request-types": (
        "broker.cli.grants",
        "request_types",
        "Which client may submit which request type; grant one.",
    ),
    "flower": (
        "broker.cli.supervise",
        "flower",
        "Start Flower against the configured transport.",
    ),
}


def _import_command(name: str) -> Any:
    module_name, attr, _ = LAZY_COMMANDS[name]
    return getattr(importlib.import_module(module_name), attr)


class LazyGroup(click.Group):
    """A group whose subcommands are imported on first use (click's lazy-loading recipe)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *LAZY_COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in LAZY_COMMANDS:
            command = _import_command(cmd_name)
            if not isinstance(command, click.Command):
                raise TypeError(f"{LAZY_COMMANDS[cmd_name][0]} has no click command {cmd_name}")
            return command
        return super().get_command(ctx, cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # Help text from the table, so `broker --help` does not import every subcommand.
        rows = [(name, LAZY_COMMANDS[name][2]) for name in sorted(LAZY_COMMANDS)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


#: commands that start the broker itself: they take the environment only, never a profile
SERVER_COMMANDS = frozenset({"run"})


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="broker")
@click.option(
    "--profile",
    metavar="FILE",
    help="Client profile to use [default: BROKER_PROFILE, else var/cli-profile.json, which "
    "`broker run` writes].",
)
@click.pass_context
def main(ctx: click.Context, profile: str | None) -> None:
    """A durable, Celery-based request broker that runs Elsa 3 workflows.

    The client commands find the broker through the profile `broker run` (`make run`) writes,
    so a second shell in the checkout needs no exports; options and BROKER_* variables win.
    """
    from broker.cli import profile as profiles
    from broker.errors import ConfigError
    from broker.settings import get_settings

    ctx.meta[profiles.CONTEXT_KEY] = profile
    if ctx.invoked_subcommand in SERVER_COMMANDS or ctx.resilient_parsing:
        return
    try:
        profiles.apply(profiles.find(get_settings(), profile))
    except ConfigError as error:
        raise click.ClickException(error.message) from error


def run_main(argv: list[str] | None = None) -> Any:
    return main.main(args=argv if argv is not None else sys.argv[1:], prog_name="broker")

"""``broker request-types``: which client may submit which request type, and granting one."""

from __future__ import annotations

import json

import click

from broker.clients.entries import RequestTypeRule
from broker.clients.registry import ClientRegistry
from broker.console.client_rules import check_key, grant, rules_for
from broker.errors import BadRequest, NotFound
from broker.store import operator_actions
from broker.wiring import cli as cli_wiring


def _clients() -> ClientRegistry:
    return cli_wiring.client_registry(upgrade=True)


def _as_dict(rule: RequestTypeRule) -> dict[str, object]:
    return {
        "clientId": rule.client_id,
        "requestType": rule.request_type,
        "requiredKeys": list(rule.required_keys),
        "allowAdditionalKeys": rule.allow_additional_keys,
    }


def _echo(rules: list[RequestTypeRule], as_json: bool) -> None:
    if as_json:
        items = [_as_dict(r) for r in rules]
        click.echo(json.dumps({"items": items, "totalCount": len(items)}))
        return
    for r in rules:
        extra = "other keys allowed" if r.allow_additional_keys else "other keys refused"
        click.echo(f"{r.client_id}\t{r.request_type}\t{','.join(r.required_keys) or '-'}\t{extra}")


@click.group("request-types")
def request_types() -> None:
    """Which client may submit which request type; grant a client a type."""


@request_types.command("list")
@click.option("--type", "request_type", help="Only the rules of this request type.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def list_rules(request_type: str | None, as_json: bool) -> None:
    """Every client rule (files and database merged), by client and type."""
    clients = _clients()
    if request_type:
        rules = list(rules_for(clients, request_type))
    else:
        rules = [r for c in clients.clients() for r in clients.rules_for(c.client_id)]
    _echo(
        sorted(rules, key=lambda r: (r.client_id.lower(), r.request_type.lower())),
        as_json,
    )


@request_types.command("grant")
@click.argument("client_id")
@click.argument("request_type")
@click.option("--key", "keys", multiple=True, help="A key every submission must carry (repeat).")
@click.option(
    "--allow-additional-keys",
    is_flag=True,
    help="Accept keys beyond the required ones.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def grant_rule(
    client_id: str,
    request_type: str,
    keys: tuple[str, ...],
    allow_additional_keys: bool,
    as_json: bool,
) -> None:
    """Allow CLIENT_ID to submit REQUEST_TYPE (replaces that client's rule for the type)."""
    try:
        required = tuple(dict.fromkeys(check_key(k, "--key") for k in keys))
        rule = grant(
            _clients(),
            client_id,
            request_type,
            required,
            allow_additional_keys,
            actor=operator_actions.cli_actor("request-types grant"),
        )
    except (BadRequest, NotFound) as exc:
        click.echo(f"error: {exc.message}", err=True)
        raise SystemExit(3 if isinstance(exc, NotFound) else 1) from None
    if as_json:
        click.echo(json.dumps(_as_dict(rule)))
    else:
        click.echo(
            f"{rule.client_id} may submit {rule.request_type}; ingress processes reload it "
            "within seconds"
        )

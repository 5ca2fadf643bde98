"""``broker webhooks`` through click's CliRunner against the real public app over mutual TLS."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from click.testing import CliRunner, Result

from broker.cli import ops as ops_commands
from broker.cli import webhooks as webhook_commands
from broker.store.models import DeadLetter, WebhookAttempt, WebhookDelivery, utcnow
from tests.unit.test_apiclient import LiveBroker, add_rows, live_broker

PUBLIC = "http://93.184.216.34/hook"  # a public address: registered without any allowlist


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveBroker]:
    with live_broker(tmp_path_factory.mktemp("webhook-cli")) as broker:
        yield broker


def run(live: LiveBroker, *args: str, who: str = "ClientA") -> Result:
    command, *rest = args
    return CliRunner().invoke(webhook_commands.webhooks, [command, *live.options(who), *rest])


def test_add_list_rotate_and_delete_an_endpoint(live: LiveBroker) -> None:
    added = run(live, "add", PUBLIC, "--event", "request.completed", "--json")
    assert added.exit_code == 0, added.output
    endpoint = json.loads(added.stdout)
    assert endpoint["secret"].startswith("whsec_")
    listed = run(live, "list")
    assert listed.exit_code == 0
    assert endpoint["id"] in listed.stdout
    assert PUBLIC in listed.stdout
    assert endpoint["secret"] not in listed.stdout
    rotated = run(live, "rotate-secret", endpoint["id"], "--json")
    assert json.loads(rotated.stdout)["secret"] != endpoint["secret"]
    assert run(live, "delete", endpoint["id"]).exit_code == 0
    assert endpoint["id"] not in run(live, "list").stdout


def test_a_private_url_is_refused_with_the_reason(live: LiveBroker) -> None:
    refused = run(live, "add", "http://127.0.0.1:9/hook")
    assert refused.exit_code == 1
    assert "refused" in refused.output


def test_deliveries_show_status_codes_and_latency(live: LiveBroker) -> None:
    endpoint = json.loads(run(live, "add", PUBLIC, "--json").stdout)
    add_rows(
        live,
        WebhookDelivery(
            id="delivery-cli",
            message_id="msg_cli",
            endpoint_id=endpoint["id"],
            request_id="req-1",
            event_type="request.completed",
            body="{}",
            state="pending",
            attempts=1,
            created_at=utcnow(),
        ),
        WebhookAttempt(
            delivery_id="delivery-cli",
            endpoint_id=endpoint["id"],
            attempt=1,
            status_code=503,
            latency_ms=87,
            outcome="retry",
            error="the receiver answered 503",
        ),
    )
    shown = run(live, "deliveries", endpoint["id"])
    assert shown.exit_code == 0, shown.output
    assert "msg_cli" in shown.stdout
    assert "503" in shown.stdout
    assert "87" in shown.stdout
    as_json = json.loads(run(live, "deliveries", endpoint["id"], "--json").stdout)
    assert as_json["items"][0]["statusCode"] == 503
    # Another client cannot read that log
    assert run(live, "deliveries", endpoint["id"], who="ClientB").exit_code == 3


def test_webhook_dead_letters_are_listed_by_the_dead_letter_command(live: LiveBroker) -> None:
    add_rows(
        live,
        DeadLetter(
            id="webhook-letter",
            kind="webhook",
            reason="Undeliverable",
            request_id="req-1",
            name="request.completed",
            error="timed out",
            attempts=8,
            data={"deliveryId": "delivery-cli"},
            replayable=True,
            created_at=utcnow(),
        ),
    )
    result = CliRunner().invoke(
        ops_commands.dead_letters, ["list", *live.options("Admin"), "--kind", "webhook", "--json"]
    )
    assert result.exit_code == 0, result.output
    assert [x["id"] for x in json.loads(result.stdout)["items"]] == ["webhook-letter"]

"""The operator commands through click's CliRunner, against the real public app over mutual TLS
(``live_broker`` from the API client tests) and, for ``outbox status``, a migrated SQLite file."""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner, Result
from sqlalchemy import update

from broker.cli import ops as ops_commands
from broker.cli import webhooks as webhook_commands
from broker.settings import Settings, set_settings
from broker.store import db
from broker.store.models import (
    BookmarkQueueItem,
    DeadLetter,
    OutboxRow,
    Request,
    WorkflowInstance,
    utcnow,
)
from tests.support.ingress import INVOICE_KEYS
from tests.unit.test_apiclient import LiveBroker, add_rows, bookmark_letter, live_broker


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveBroker]:
    with live_broker(tmp_path_factory.mktemp("cli")) as broker:
        yield broker


def run(group: click.Group, live: LiveBroker, *args: str, who: str = "ClientA") -> Result:
    """``broker <group> <command> <args>`` presenting ``who``'s certificate."""
    command, *rest = args
    return CliRunner().invoke(group, [command, *live.options(who), *rest])


def submitted_id(live: LiveBroker, request_type: str = "OpenType", who: str = "ClientA") -> str:
    result = run(ops_commands.requests, live, "submit", request_type, "--json", who=who)
    assert result.exit_code == 0, result.stderr
    return str(json.loads(result.stdout)["correlationId"])


def set_status(live: LiveBroker, request_id: str, status: str, error: str | None = None) -> None:
    with db.transaction(live.session_factory) as session:
        session.execute(
            update(Request).where(Request.id == request_id)
            .values(status=status, error_detail=error)
        )  # fmt: skip


# broker requests ----------------------------------------------------------------------------------


def test_submit_prints_the_new_id_and_get_reads_it_back(live: LiveBroker) -> None:
    # When an operator submits with keys and a payload
    result = run(ops_commands.requests, live, "submit", "InvoiceProcess",
                 "--key", "InvoiceNumber=INV-1", "-k", "VendorCode=V-9",
                 "--payload", '{"amount": 250}')  # fmt: skip
    # Then it prints the correlation id alone (ID=$(broker requests submit ...) works), and the
    # record reads back as JSON, Queued
    assert result.exit_code == 0, result.stderr
    request_id = result.stdout.strip()
    assert result.stdout == f"{request_id}\n"
    assert request_id.split() == [request_id]
    got = run(ops_commands.requests, live, "get", request_id, "--json")
    assert got.exit_code == 0
    assert json.loads(got.stdout)["keys"] == INVOICE_KEYS
    assert json.loads(got.stdout)["status"] == "Queued"


def test_submit_reads_the_payload_from_a_file_and_honours_idempotency(
    live: LiveBroker, tmp_path: Path
) -> None:
    payload = tmp_path / "payload.json"
    payload.write_text('{"amount": 7}')
    key = str(uuid.uuid4())
    args = ("submit", "OpenType", "--payload", f"@{payload}", "--idempotency-key", key)
    first = run(ops_commands.requests, live, *args)
    again = run(ops_commands.requests, live, *args)
    quiet = run(ops_commands.requests, live, *args, "-q")
    # Then every answer is the same id alone; the repeat says so on stderr unless -q
    assert first.stdout.strip()
    assert first.stderr == ""
    assert again.stdout == quiet.stdout == first.stdout
    assert "existing request" in again.stderr
    assert quiet.stderr == ""


def test_a_refused_submission_exits_1_with_the_servers_reason(live: LiveBroker) -> None:
    # When a required key is missing
    result = run(ops_commands.requests, live, "submit", "InvoiceProcess", "--json",
                 "--key", "InvoiceNumber=INV-1")  # fmt: skip
    # Then the exit code is 1 and stderr holds the server's body with the status
    assert result.exit_code == 1
    body = json.loads(result.stderr)
    assert body["keys"] == ["VendorCode"]
    assert body["status"] == 400


@pytest.mark.parametrize(
    "args",
    [
        ("--key", "no-equals-sign"),
        ("--key", "a=1", "--key", "a=2"),
        ("--payload", "{not json"),
        ("--payload", "[1, 2]"),
        ("--payload", "@/no/such/file.json"),
    ],
)
def test_bad_submit_options_are_usage_errors(live: LiveBroker, args: tuple[str, ...]) -> None:
    result = run(ops_commands.requests, live, "submit", "OpenType", *args)
    assert result.exit_code == 2, result.output


def test_get_of_an_unknown_request_exits_3(live: LiveBroker) -> None:
    result = run(ops_commands.requests, live, "get", "no-such-request")
    assert result.exit_code == 3
    assert "not found" in result.stderr


def test_list_filters_by_status_and_stops_at_the_limit(live: LiveBroker) -> None:
    # Given three requests of the Admin client, one of them cancelled
    ids = [submitted_id(live, who="Admin") for _ in range(3)]
    assert run(ops_commands.requests, live, "cancel", ids[0], who="Admin").exit_code == 0
    # When the queued ones are listed, and then at most one record
    queued = run(ops_commands.requests, live, "list", "--status", "queued", "--json", who="Admin")
    one = run(ops_commands.requests, live, "list", "--limit", "1", "--json", who="Admin")
    # Then the filter and the limit hold, in the API's page shape
    listed = json.loads(queued.stdout)["items"]
    assert {r["correlationId"] for r in listed} >= set(ids[1:])
    assert ids[0] not in {r["correlationId"] for r in listed}
    first = json.loads(one.stdout)
    assert [r["correlationId"] for r in first["items"]] == [ids[2]]
    assert (first["totalCount"], first["page"], first["pageSize"]) == (1, 0, 1)


def test_list_events_and_types_print_tables(live: LiveBroker) -> None:
    request_id = submitted_id(live)
    listed = run(ops_commands.requests, live, "list")
    events = run(ops_commands.requests, live, "events", request_id)
    types = run(ops_commands.requests, live, "types")
    assert listed.stdout.splitlines()[0].split() == ["ID", "TYPE", "STATUS", "SUB-STATUS",
                                                     "SUBMITTED"]  # fmt: skip
    assert request_id in listed.stdout
    assert "RequestSubmitted" in events.stdout
    assert "InvoiceProcess" in types.stdout


def test_watch_times_out_with_exit_4_while_the_request_stays_queued(live: LiveBroker) -> None:
    request_id = submitted_id(live)
    result = run(ops_commands.requests, live, "watch", request_id,
                 "--timeout", "0.3", "--interval", "0.05")  # fmt: skip
    assert result.exit_code == 4
    assert [line.split()[1] for line in result.stdout.splitlines()] == ["Queued"]
    assert "timed out" in result.stderr


@pytest.mark.parametrize(("status", "code"), [("Completed", 0), ("Faulted", 1), ("Cancelled", 1)])
def test_watch_exits_by_the_terminal_status(live: LiveBroker, status: str, code: int) -> None:
    request_id = submitted_id(live)
    set_status(live, request_id, status, error="boom" if status == "Faulted" else None)
    result = run(ops_commands.requests, live, "watch", request_id, "--json", "--timeout", "5")
    assert result.exit_code == code
    [line] = result.stdout.splitlines()
    assert json.loads(line)["status"] == status


def test_watch_of_an_unknown_request_exits_3(live: LiveBroker) -> None:
    result = run(ops_commands.requests, live, "watch", "no-such-request", "--timeout", "1")
    assert result.exit_code == 3


def test_cancelling_a_terminal_request_exits_1(live: LiveBroker) -> None:
    request_id = submitted_id(live)
    assert run(ops_commands.requests, live, "cancel", request_id).exit_code == 0
    again = run(ops_commands.requests, live, "cancel", request_id)
    assert again.exit_code == 1
    assert "HTTP 409" in again.stderr


def test_missing_default_certificates_exit_1_naming_the_file(settings: Settings) -> None:
    # Given settings whose certificate folder holds no DevClient files
    set_settings(settings)
    try:
        result = CliRunner().invoke(ops_commands.requests, ["get", "x"])
    finally:
        set_settings(None)
    # Then the command says which file is missing
    assert result.exit_code == 1
    assert "DevClient.pem" in result.stderr
    assert "HTTP" not in result.stderr  # raised before any call


# broker dead-letters ------------------------------------------------------------------------------


def test_dead_letter_commands_need_an_admin_scope(live: LiveBroker) -> None:
    result = run(ops_commands.dead_letters, live, "list")
    assert result.exit_code == 1
    assert "HTTP 403" in result.stderr


def test_replay_all_replays_every_replayable_letter_of_the_kind(live: LiveBroker) -> None:
    # Given two replayable bookmark letters and one already replayed
    fresh = [bookmark_letter(), bookmark_letter()]
    done = bookmark_letter(replayable=False, replayed_at=utcnow())
    add_rows(live, *fresh, done)
    # When an operator replays them all
    result = run(ops_commands.dead_letters, live, "replay", "--all", "--kind", "bookmark",
                 "--json", who="Admin")  # fmt: skip
    # Then each replayable one was replayed once and the progress went to stderr
    assert result.exit_code == 0, result.stderr
    summary = json.loads(result.stdout)
    assert {x.id for x in fresh} <= set(summary["replayed"])
    assert done.id not in summary["replayed"]
    assert summary["failed"] == []
    assert "replaying bookmark" in result.stderr
    # And a second run finds nothing left to do
    again = run(ops_commands.dead_letters, live, "replay", "--all", "--kind", "bookmark",
                "--json", who="Admin")  # fmt: skip
    assert json.loads(again.stdout)["replayed"] == []


def test_replaying_a_request_letter_reopens_the_faulted_request(live: LiveBroker) -> None:
    # Given a Faulted request with its dead letter
    request_id = submitted_id(live)
    set_status(live, request_id, "Faulted", error="out of retries")
    letter = bookmark_letter(kind="request", reason="Exhausted", request_id=request_id,
                             name="broker.run_request", data={})  # fmt: skip
    add_rows(live, letter)
    listed = run(ops_commands.dead_letters, live, "list", "--kind", "request", who="Admin")
    assert letter.id in listed.stdout
    # When it is replayed
    result = run(ops_commands.dead_letters, live, "replay", letter.id, who="Admin")
    # Then the same record is Processing again
    assert result.exit_code == 0, result.stderr
    assert result.stdout.startswith(f"replayed {letter.id}")
    with live.client() as api:
        assert api.get(request_id)["status"] == "Processing"


@pytest.mark.parametrize("args", [(), ("some-id", "--all", "--kind", "request"), ("--all",)])
def test_replay_needs_an_id_or_all_with_a_kind(live: LiveBroker, args: tuple[str, ...]) -> None:
    result = run(ops_commands.dead_letters, live, "replay", *args, who="Admin")
    assert result.exit_code == 2


def test_get_and_delete_a_bookmark_letter(live: LiveBroker) -> None:
    letter = bookmark_letter()
    add_rows(live, letter)
    got = run(ops_commands.dead_letters, live, "get", letter.id, "--kind", "bookmark", "--json",
              who="Admin")  # fmt: skip
    assert json.loads(got.stdout)["reason"] == "Failed"
    assert run(ops_commands.dead_letters, live, "delete", letter.id, who="Admin").exit_code == 0
    gone = run(ops_commands.dead_letters, live, "delete", letter.id, who="Admin")
    assert gone.exit_code == 3


# broker instances, broker runtime -----------------------------------------------------------------


def test_instances_list_get_and_cancel(live: LiveBroker) -> None:
    instance_id = str(uuid.uuid4())
    add_rows(live, WorkflowInstance(id=instance_id, definition_id="cli-def",
                                    definition_version_id="v1", version=1))  # fmt: skip
    listed = run(ops_commands.instances, live, "list", "--definition-id", "cli-def", "--json",
                 who="Admin")  # fmt: skip
    got = run(ops_commands.instances, live, "get", instance_id, "--journal", who="Admin")
    cancelled = run(ops_commands.instances, live, "cancel", instance_id, who="Admin")
    missing = run(ops_commands.instances, live, "get", "no-such-instance", who="Admin")
    assert [i["id"] for i in json.loads(listed.stdout)["items"]] == [instance_id]
    assert "cli-def" in got.stdout
    assert cancelled.exit_code == 0
    assert "Cancelled" in cancelled.stdout
    assert missing.exit_code == 3


def test_runtime_pause_status_resume(live: LiveBroker) -> None:
    assert "paused" in run(ops_commands.runtime, live, "pause", who="Admin").stdout
    status = run(ops_commands.runtime, live, "status", "--json", who="Admin")
    assert json.loads(status.stdout)["paused"] is True
    assert "running" in run(ops_commands.runtime, live, "resume", who="Admin").stdout


# broker outbox ------------------------------------------------------------------------------------


def outbox_row(state: str, **values: Any) -> OutboxRow:
    return OutboxRow(id=str(uuid.uuid4()), task_name="broker.run_request", queue="broker",
                     args={}, state=state, **values)  # fmt: skip


def test_outbox_status_reads_counts_and_the_oldest_due_row(sqlite_url: str) -> None:
    # Given pending rows (one due two minutes ago, one due later), a dispatched and a dead row
    db.upgrade(sqlite_url)
    now = utcnow()
    factory = db.make_session_factory(db.make_engine(sqlite_url))
    with db.transaction(factory) as session:
        session.add_all([
            outbox_row("pending", available_at=now - dt.timedelta(minutes=2)),
            outbox_row("pending", available_at=now + dt.timedelta(hours=1)),
            outbox_row("dispatched"),
            outbox_row("dead"),
            BookmarkQueueItem(id="q-1", name="Approved"),
            DeadLetter(id="d-1", kind="outbox", reason="Undeliverable"),
        ])  # fmt: skip
    # When the operator asks
    result = CliRunner().invoke(ops_commands.outbox, ["status", "--database-url", sqlite_url,
                                                      "--json"])  # fmt: skip
    human = CliRunner().invoke(ops_commands.outbox, ["status", "--database-url", sqlite_url])
    db.dispose_engines()
    # Then the counts and the age come from the rows
    assert result.exit_code == 0, result.output
    status = json.loads(result.stdout)
    assert status["outbox"] == {"pending": 2, "dispatched": 1, "done": 0, "dead": 1}
    assert status["oldestPendingAgeSeconds"] >= 120
    assert status["bookmarkQueueDepth"] == 1
    assert status["deadLetters"] == {"request": 0, "outbox": 1, "bookmark": 0, "webhook": 0}
    assert "outbox pending" in human.stdout


def test_outbox_status_of_an_unmigrated_database_exits_1(sqlite_url: str) -> None:
    result = CliRunner().invoke(ops_commands.outbox, ["status", "--database-url", sqlite_url])
    db.dispose_engines()
    assert result.exit_code == 1
    assert "broker db upgrade" in result.stderr


# Help ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("group", "commands"),
    [
        (ops_commands.requests, ["cancel", "events", "get", "list", "submit", "types", "watch"]),
        (ops_commands.dead_letters, ["delete", "get", "list", "replay"]),
        (ops_commands.instances, ["cancel", "get", "list"]),
        (ops_commands.runtime, ["pause", "resume", "status"]),
        (ops_commands.outbox, ["status"]),
    ],
)
def test_every_group_documents_its_commands(group: click.Group, commands: list[str]) -> None:
    result = CliRunner().invoke(group, ["--help"])
    assert result.exit_code == 0
    assert sorted(group.commands) == commands
    for name in commands:
        assert name in result.stdout


def test_api_commands_document_the_connection_defaults() -> None:
    result = CliRunner().invoke(ops_commands.requests, ["get", "--help"])
    assert "BROKER_PUBLIC_BIND" in result.stdout
    assert "DevClient.pem" in result.stdout
    assert "--key-file" in result.stdout


def test_every_list_prints_the_apis_page_shape_with_json(live: LiveBroker) -> None:
    # Given a request of the Admin client and a webhook endpoint
    request_id = submitted_id(live, who="Admin")
    added = CliRunner().invoke(
        webhook_commands.webhooks,
        ["add", *live.options("Admin"), "http://93.184.216.34/hook", "--json"],  # public
    )
    endpoint_id = json.loads(added.stdout)["id"]
    lists: list[tuple[click.Group, tuple[str, ...]]] = [
        (ops_commands.requests, ("list",)),
        (ops_commands.requests, ("events", request_id)),
        (ops_commands.requests, ("types",)),
        (ops_commands.dead_letters, ("list",)),
        (ops_commands.dead_letters, ("list", "--all")),
        (ops_commands.instances, ("list",)),
        (webhook_commands.webhooks, ("list",)),
        (webhook_commands.webhooks, ("deliveries", endpoint_id)),
    ]
    for group, args in lists:
        # When each list is printed as JSON
        result = run(group, live, *args, "--json", who="Admin")
        # Then it is {items, totalCount, page, pageSize}, like the API's pages
        assert result.exit_code == 0, (args, result.output)
        body = json.loads(result.stdout)
        assert isinstance(body, dict), args
        assert {"items", "totalCount", "page", "pageSize"} <= set(body), args
        assert isinstance(body["items"], list), args
        assert body["totalCount"] >= len(body["items"]), args

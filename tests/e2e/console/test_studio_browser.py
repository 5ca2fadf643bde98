"""Elsa Studio over the broker's own Elsa API, in a real headless chromium, on a full stack
(ingress, internal listener, worker, beat and the console, each its own process).

1. the definition list shows the shipped workflows with their latest and published versions;
2. the designer opens invoice-process.json and renders every activity (names visible) and
   connection, and its activity picker lists the engine's activities;
3. a change saved and published through Studio's API creates version N+1 in the folder: a request
   submitted afterwards runs N+1, while an instance that waited on N finishes on N;
4. the instance viewer opens a finished request's instance and shows its journal and activity
   executions;
5. no key: 401; a viewer key cannot publish: 403; nothing changes on refusal.

Screenshots go to var/screenshots/.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.console.conftest import (
    StudioStack,
    launched_browser,
    running_studio,
    screenshot,
    wait_for_ingress_version,
)
from tests.support.ingress import INVOICE_KEYS
from tests.support.services import PROJECT_ROOT

pytest.importorskip("broker.console.api", reason="the Elsa API package is not in this checkout")

STUDIO_TIMEOUT_MS = 90_000
INVOICE = "invoice-process"
#: the activity names of invoice-process.json that the designer must show
INVOICE_NAMES = (
    "ReceiveInvoice",
    "SmallEnough",
    "PostToLedger",
    "AskAccountsPayable",
    "WaitForApproval",
)


@pytest.fixture(scope="module")
def studio(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StudioStack]:
    with running_studio(tmp_path_factory.mktemp("studio")) as studio:
        yield studio


@pytest.fixture(scope="module")
def browser(studio: StudioStack) -> Iterator[Any]:
    with launched_browser() as launched:
        yield launched


@pytest.fixture
def page_as(studio: StudioStack, browser: Any) -> Iterator[Any]:
    contexts: list[Any] = []

    def make(role: str) -> Any:
        context = browser.new_context(
            extra_http_headers={"Authorization": f"ApiKey {studio.keys[role]}"},
            viewport={"width": 1440, "height": 900},
        )
        contexts.append(context)
        return context.new_page()

    yield make
    for context in contexts:
        context.close()


def latest_and_published(studio: StudioStack, definition_id: str) -> tuple[int, int]:
    status, body = studio.api(
        "GET", f"workflow-definitions/by-definition-id/{definition_id}?versionOptions=Latest"
    )
    assert status == 200, body
    status, published = studio.api(
        "GET", f"workflow-definitions/by-definition-id/{definition_id}?versionOptions=Published"
    )
    assert status == 200, published
    return int(body["version"]), int(published["version"])


def test_1_the_definition_list_shows_the_shipped_workflows_and_versions(
    studio: StudioStack, page_as: Any
) -> None:
    page = page_as("viewer")
    page.goto(f"{studio.url}/workflows")
    row = page.locator("tr", has_text=INVOICE)
    row.wait_for(timeout=STUDIO_TIMEOUT_MS)
    latest, published = latest_and_published(studio, INVOICE)
    cells = [c.strip() for c in row.locator("td").all_inner_texts()]
    assert "Invoice process" in cells
    assert str(latest) in cells
    assert str(published) in cells
    # and every other shipped workflow has its row too
    for shipped in sorted((PROJECT_ROOT / "workflows").glob("*.json")):
        definition_id = json.loads(shipped.read_text())["definitionId"]
        assert page.locator("tr", has_text=definition_id).count() >= 1, definition_id
    screenshot(page, "studio-definition-list")


def test_2_the_designer_draws_invoice_process_and_lists_the_activities(
    studio: StudioStack, page_as: Any
) -> None:
    page = page_as("designer")
    page.goto(f"{studio.url}/workflows/{INVOICE}")
    for name in INVOICE_NAMES:
        page.get_by_text(name, exact=True).first.wait_for(timeout=STUDIO_TIMEOUT_MS)
    document = json.loads((studio.workflows / "invoice-process.json").read_text())
    connections = document["root"]["connections"]
    page.wait_for_function(
        f"document.querySelectorAll('.x6-edge').length >= {len(connections)}",
        timeout=STUDIO_TIMEOUT_MS,
    )
    assert page.locator(".x6-node").count() >= len(document["root"]["activities"])
    # The activity picker lists the engine's activities: every category of the descriptors, and
    # the activities of a category once it is opened
    status, descriptors = studio.api("GET", "descriptors/activities")
    assert status == 200
    browsable = [d for d in descriptors["items"] if d.get("isBrowsable", True)]
    for category in sorted({d["category"] for d in browsable}):
        assert page.get_by_text(category, exact=True).count() >= 1, category
    console = sorted(d["displayName"] for d in browsable if d["category"] == "Console")
    assert console, "the engine's catalog has no Console activity"
    page.get_by_text("Console", exact=True).first.click()
    for name in console:
        page.get_by_text(name, exact=True).first.wait_for(timeout=10_000)
    screenshot(page, "studio-designer")


def test_3_publishing_version_n_plus_1_keeps_waiting_instances_on_n(
    studio: StudioStack,
) -> None:
    stack = studio.stack
    # Given a big invoice waiting for approval on version N
    waiting = stack.submit("InvoiceProcess", INVOICE_KEYS, {"amount": 5000})
    version_n = stack.wait_suspended(waiting)["workflow"]["version"]
    files_before = studio.files_of(INVOICE)
    # When a designer changes the approved status through Studio's API, saves and publishes
    status, latest = studio.api(
        "GET", f"workflow-definitions/by-definition-id/{INVOICE}?versionOptions=Latest"
    )
    assert status == 200, latest
    manual = next(a for a in latest["root"]["activities"] if a["id"] == "manual-status")
    manual["outputValue"]["expression"]["value"] = "Approved on the new version"
    status, saved = studio.api("POST", "workflow-definitions", {"model": latest, "publish": False})
    assert status == 200, saved
    status, published = studio.api("POST", f"workflow-definitions/{INVOICE}/publish", {})
    assert status == 200, published
    # Then version N+1 is a file in the workflow folder
    files_after = studio.files_of(INVOICE)
    assert max(files_after.values()) == version_n + 1, files_after
    assert len(files_after) == len(files_before) + 1 or files_after != files_before
    # And once the ingress has loaded it (a published file is live within seconds, as any saved
    # file is), a request submitted afterwards runs N+1
    wait_for_ingress_version(stack, "InvoiceProcess", version_n + 1)
    fresh = stack.submit(
        "InvoiceProcess", {**INVOICE_KEYS, "InvoiceNumber": "INV-2"}, {"amount": 7000}
    )
    assert stack.wait_suspended(fresh)["workflow"]["version"] == version_n + 1
    # While the instance that waited on N finishes on N
    for request_id in (waiting, fresh):
        assert stack.event("approval", request_id, {"decision": "approved"}).status == 202
    old = stack.wait_status(waiting, "Completed")
    new = stack.wait_status(fresh, "Completed")
    assert old["workflow"]["version"] == version_n
    assert old["result"]["status"] == "Completed"
    assert new["workflow"]["version"] == version_n + 1
    assert new["result"]["status"] == "Approved on the new version"


def test_4_the_instance_viewer_shows_a_finished_requests_journal(
    studio: StudioStack, page_as: Any
) -> None:
    stack = studio.stack
    request_id = stack.submit(
        "InvoiceProcess", {**INVOICE_KEYS, "InvoiceNumber": "INV-4"}, {"amount": 9000}
    )
    stack.wait_suspended(request_id)
    assert stack.event("approval", request_id, {"decision": "approved"}).status == 202
    instance_id = stack.wait_status(request_id, "Completed")["workflow"]["instanceId"]
    status, journal = studio.api("GET", f"workflow-instances/{instance_id}/journal", role="viewer")
    assert status == 200, journal
    assert journal["items"], journal
    status, executions = studio.api(
        "GET", f"activity-executions/list?workflowInstanceId={instance_id}", role="viewer"
    )
    assert status == 200, executions
    ran = {e["activityId"] for e in executions["items"]}
    assert {"receive", "small-enough", "ask-ap", "wait-approval"} <= ran, ran
    # The viewer shows the journal (each activity's start and completion) and the executions
    page = page_as("viewer")
    page.goto(f"{studio.url}/instances/{instance_id}")
    for entry in ("HTTP Endpoint - Completed", "Event - Completed", "Send Email - Completed"):
        page.get_by_text(entry, exact=True).first.wait_for(timeout=STUDIO_TIMEOUT_MS)
    page.get_by_text("WaitForApproval", exact=True).first.click()
    page.get_by_text("Executions", exact=False).first.click()
    page.locator("td", has_text="Completed").first.wait_for(timeout=STUDIO_TIMEOUT_MS)
    screenshot(page, "studio-instance-viewer")


def test_5_refusals_are_401_and_403_and_change_nothing(studio: StudioStack) -> None:
    files_before = studio.files_of(INVOICE)
    versions_before = latest_and_published(studio, INVOICE)
    status, _ = studio.api("GET", "workflow-definitions", role=None)
    assert status == 401
    status, _ = studio.api("POST", f"workflow-definitions/{INVOICE}/publish", {}, role=None)
    assert status == 401
    status, latest = studio.api(
        "GET",
        f"workflow-definitions/by-definition-id/{INVOICE}?versionOptions=Latest",
        role="viewer",
    )
    assert status == 200
    status, _ = studio.api(
        "POST", "workflow-definitions", {"model": latest, "publish": True}, role="viewer"
    )
    assert status == 403
    status, _ = studio.api("POST", f"workflow-definitions/{INVOICE}/publish", {}, role="viewer")
    assert status == 403
    assert studio.files_of(INVOICE) == files_before
    assert latest_and_published(studio, INVOICE) == versions_before

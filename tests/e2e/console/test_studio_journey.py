"""An author's whole journey in Elsa Studio, driven through Studio's own UI in headless chromium,
on a full stack (ingress, internal listener, worker, beat and the console) whose workflow folder
starts empty.

As a designer: create a workflow, drag two activities from the toolbox, connect them port to port,
set an input, publish, run it and land in the instance viewer showing it Finished with its
journal, open it again from the instance list and go back to its definition; give it a request
type, publish, have an operator grant a client the type, and that client's request completes.
A viewer is then offered no create, publish or delete. The journey fails on any 4xx/5xx that
Studio receives from ``/elsa/api`` and on any error toast. Screenshots: ``var/screenshots/``.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e import live
from tests.e2e.console.conftest import (
    StudioStack,
    authoring_studio,
    launched_browser,
    screenshot,
    wait_for_ingress_version,
)

pytest.importorskip("broker.console.api", reason="the Elsa API package is not in this checkout")

STUDIO_TIMEOUT_MS = 90_000
NAME = "Greeting journey"
TEXT = "Hello from the journey"
REQUEST_TYPE = "GreetingJourney"
#: records every error toast Studio shows (MudBlazor snackbars of severity error)
TOAST_WATCH = """
window.__errorToasts = [];
new MutationObserver(() => {
  for (const el of document.querySelectorAll('.mud-snackbar')) {
    if (/error/i.test(el.className) && !el.dataset.journeySeen) {
      el.dataset.journeySeen = '1';
      window.__errorToasts.push(el.innerText);
    }
  }
}).observe(document, {subtree: true, childList: true});
"""


@pytest.fixture(scope="module")
def studio(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StudioStack]:
    with authoring_studio(tmp_path_factory, "journey") as found:
        yield found


@pytest.fixture(scope="module")
def browser(studio: StudioStack) -> Iterator[Any]:
    with launched_browser() as launched:
        yield launched


class Watched:
    """A page of one role's browser context that records what Studio was refused."""

    def __init__(self, page: Any, studio: StudioStack) -> None:
        self.page = page
        self.refused: list[str] = []
        self.toasts: list[str] = []
        page.set_default_timeout(STUDIO_TIMEOUT_MS)
        page.add_init_script(TOAST_WATCH)
        api = f"{studio.url}/elsa/api/"
        page.on(
            "response",
            lambda r: (
                self.refused.append(f"{r.request.method} {r.url} -> {r.status}")
                if r.url.startswith(api) and r.status >= 400
                else None
            ),
        )

    def check(self, step: str) -> None:
        """Fail when Studio was refused a call or showed an error toast so far."""
        self.toasts += self.page.evaluate("window.__errorToasts || []")
        self.page.evaluate("window.__errorToasts = []")
        assert not self.refused, f"{step}: Studio was refused {self.refused}"
        assert not self.toasts, f"{step}: Studio showed errors {self.toasts}"


@pytest.fixture
def page_as(studio: StudioStack, browser: Any) -> Iterator[Any]:
    contexts: list[Any] = []

    def make(role: str) -> Watched:
        context = browser.new_context(
            extra_http_headers={"Authorization": f"ApiKey {studio.keys[role]}"},
            viewport={"width": 1440, "height": 900},
        )
        contexts.append(context)
        return Watched(context.new_page(), studio)

    yield make
    for context in contexts:
        context.close()


def center(locator: Any) -> tuple[float, float]:
    box = locator.bounding_box()
    assert box is not None
    return box["x"] + box["width"] / 2, box["y"] + box["height"] / 2


def toolbar_publish(page: Any) -> Any:
    """The designer's Publish button (the first of the toolbar's button group)."""
    return page.locator("[role=toolbar] .mud-button-group-root button").first


def publish_in_studio(page: Any) -> None:
    toolbar_publish(page).click()
    page.locator(".mud-snackbar", has_text="Workflow published").first.wait_for()


def open_designer(page: Any) -> None:
    page.locator(".x6-graph-svg").first.wait_for()


def wait_accepted(stack: live.LiveStack, request_type: str, timeout: float = 30.0) -> str:
    """Submit ``request_type`` as DevClient until the ingress has reloaded its rules."""
    deadline = time.monotonic() + timeout
    while True:
        body = {"requestType": request_type, "keys": {}}
        response = stack.call(live.DEV, "POST", "/requests", body)
        if response.status == 202:
            return str(response.body["correlationId"])
        if time.monotonic() > deadline:
            raise AssertionError(f"{request_type} still refused: {response}")
        time.sleep(0.5)


@pytest.mark.timeout(900)
def test_an_author_creates_designs_publishes_runs_and_serves_a_workflow(
    studio: StudioStack, page_as: Any
) -> None:
    author = page_as("designer")
    page = author.page
    # 1. From an empty list, create a workflow: Studio opens it in the designer
    page.goto(f"{studio.url}/workflows")
    create = page.get_by_role("button", name="Create workflow")
    create.wait_for()
    page.wait_for_function(
        "[...document.querySelectorAll('button')].some(b => b.innerText.trim().toLowerCase() "
        "== 'create workflow' && !b.disabled)"
    )
    status, listed = studio.api("GET", "workflow-definitions?versionOptions=Latest")
    assert status == 200, listed
    assert listed["totalCount"] == 0, listed
    screenshot(page, "journey-1-empty-list")
    create.click()
    name = page.locator(".mud-dialog .mud-input-control", has_text="Name").locator("input").first
    name.fill(NAME)
    page.locator(".mud-dialog-actions button").last.click()
    page.wait_for_url(re.compile(r"/workflows/[0-9a-f]+$"))
    definition_id = page.url.rsplit("/", 1)[1]
    open_designer(page)
    screenshot(page, "journey-1-created")
    author.check("create")

    # 2. Drag two activities from the toolbox onto the canvas
    page.get_by_text("Console", exact=True).first.click()
    write_line = page.get_by_text("Write Line", exact=True).first
    canvas = page.locator(".x6-graph-svg").first
    write_line.drag_to(canvas, target_position={"x": 150, "y": 200})
    page.locator(".x6-node").first.wait_for()
    write_line.drag_to(canvas, target_position={"x": 480, "y": 200})
    page.wait_for_function("document.querySelectorAll('.x6-node').length == 2")
    screenshot(page, "journey-2-dragged")

    # 3. Connect them, the first one's Done port to the second one's In port
    first, second = page.locator(".x6-node").nth(0), page.locator(".x6-node").nth(1)
    x1, y1 = center(first.locator(".x6-port-body[port-group='out']").first)
    x2, y2 = center(second.locator(".x6-port-body[port-group='in']").first)
    page.mouse.move(x1, y1)
    page.mouse.down()
    page.mouse.move((x1 + x2) / 2, y1 + 30, steps=8)
    page.mouse.move(x2, y2, steps=8)
    page.mouse.up()
    page.wait_for_function("document.querySelectorAll('.x6-edge').length == 1")
    screenshot(page, "journey-3-connected")

    # 4. Set the first one's Text input
    first.click()
    text = page.locator(".mud-input-control", has=page.get_by_text("The text.", exact=True))
    text.locator("input").first.fill(TEXT)
    text.locator("input").first.press("Tab")
    page.wait_for_timeout(1500)  # Studio's auto-save runs on a short debounce
    screenshot(page, "journey-4-input")

    # 5. Save and publish: version 1 is published with both activities, the input and the edge
    publish_in_studio(page)
    screenshot(page, "journey-5-published")
    status, published = studio.api(
        "GET", f"workflow-definitions/by-definition-id/{definition_id}?versionOptions=Published"
    )
    assert status == 200, published
    assert published["version"] == 1
    assert published["name"] == NAME
    activities = published["root"]["activities"]
    assert sorted(a["type"] for a in activities) == ["Elsa.WriteLine", "Elsa.WriteLine"]
    texts = [a.get("text", {}).get("expression", {}).get("value") for a in activities]
    assert TEXT in texts, activities
    (connection,) = published["root"]["connections"]
    assert connection["source"]["port"] == "Done"
    assert connection["target"]["port"] == "In"
    assert connection["source"]["activity"] != connection["target"]["activity"]
    author.check("publish")

    # 6. Run it: Studio lands in the instance viewer, which shows it Finished with its journal
    page.locator("[role=toolbar] button").last.click()
    page.wait_for_url(re.compile(r"/workflows/instances/[^/]+/view$"))
    instance_id = page.url.split("/")[-2]
    page.get_by_text("Finished", exact=True).first.wait_for()
    page.get_by_text("Write Line - Completed", exact=True).first.wait_for()
    assert page.get_by_text("Write Line - Completed", exact=True).count() == 2
    screenshot(page, "journey-6-instance-viewer")
    status, instance = studio.api("GET", f"workflow-instances/{instance_id}", role="viewer")
    assert status == 200, instance
    assert instance["status"] == "Finished", instance
    author.check("run")
    # The instance list opens it in the viewer, and the viewer leads back to its definition
    page.goto(f"{studio.url}/instances")
    page.locator("tr", has_text=NAME).first.click()
    page.wait_for_url(re.compile(rf"/instances/{instance_id}$"))
    page.get_by_text("Definition ID", exact=True).first.wait_for()
    page.locator("a", has_text=definition_id).first.click()
    # the viewer's link goes through Studio's own route, which the console serves as the designer
    page.wait_for_url(re.compile(rf"/workflows/(definitions/)?{definition_id}(/edit)?$"))
    open_designer(page)
    author.check("instance list, viewer, definition")

    # 7. Give it a request type without writing JSON, and publish it
    page.locator("#request-type summary").click()
    page.locator("input[name=requestType]").fill(REQUEST_TYPE)
    page.get_by_role("button", name="Set request type").click()
    page.wait_for_url(re.compile(rf"/workflows/(definitions/)?{definition_id}(/edit)?\?message="))
    open_designer(page)
    page.locator(".x6-node").nth(1).wait_for()
    publish_in_studio(page)
    author.check("request type")
    # An operator sees that no client may submit it yet and grants one
    operator = page_as("operator")
    page = operator.page
    page.goto(f"{studio.url}/workflows/{definition_id}")
    page.locator("#request-type summary").click()
    panel = page.locator("#request-type")
    assert panel.locator("[data-request-type]").inner_text() == REQUEST_TYPE
    panel.get_by_text(f"No client may submit {REQUEST_TYPE} yet").wait_for()
    panel.locator("select[name=clientId]").select_option(live.DEV)
    panel.get_by_role("button", name=f"Grant {REQUEST_TYPE}").click()
    page.wait_for_url(re.compile(r"\?message="))
    page.locator("#request-type table.rules td", has_text=live.DEV).wait_for()
    page.locator(".x6-node").nth(1).wait_for()
    screenshot(page, "journey-7-request-type-granted")
    operator.check("grant")
    # And the client's request of that type runs the published workflow to completion
    wait_for_ingress_version(studio.stack, REQUEST_TYPE, 2)
    request_id = wait_accepted(studio.stack, REQUEST_TYPE)
    done = studio.stack.wait_status(request_id, "Completed")
    assert done["workflow"]["definitionId"] == definition_id
    assert done["workflow"]["version"] == 2


@pytest.mark.timeout(600)
def test_a_viewer_is_offered_no_create_publish_or_delete(studio: StudioStack, page_as: Any) -> None:
    # Given a workflow the journey (or this test) published
    status, listed = studio.api("GET", "workflow-definitions?versionOptions=Latest")
    assert status == 200
    if not listed["items"]:
        doc = {"name": NAME, "root": None}
        status, saved = studio.api("POST", "workflow-definitions", {"model": doc, "publish": True})
        assert status == 200, saved
    definition_id = studio.api("GET", "workflow-definitions?versionOptions=Latest")[1]["items"][0][
        "definitionId"
    ]
    viewer = page_as("viewer")
    page = viewer.page
    # When a viewer opens the list, create and import are disabled
    page.goto(f"{studio.url}/workflows")
    row = page.locator("tr", has_text=definition_id)
    row.wait_for()
    assert page.get_by_role("button", name="Create workflow").is_disabled()
    # and the row's menu offers View, with Delete, Publish and Unpublish disabled
    row.locator("button").last.click()
    menu = page.locator(".mud-popover-open")
    menu.get_by_text("View", exact=True).wait_for()
    assert menu.get_by_text("Edit", exact=True).count() == 0
    for item in ("Delete", "Publish", "Unpublish"):
        entry = menu.locator(".mud-menu-item", has_text=item).first
        assert "disabled" in (entry.get_attribute("class") or ""), item
    screenshot(page, "journey-viewer-list")
    # The designer opens read-only, without a publish button, and the page offers no request-type
    # change and no grant
    page.goto(f"{studio.url}/workflows/{definition_id}")
    open_designer(page)
    page.get_by_text("currently in read-only mode", exact=False).first.wait_for()
    assert page.locator("[role=toolbar] .mud-button-group-root").count() == 0
    assert page.get_by_role("button", name="Set request type").count() == 0
    assert page.locator("select[name=clientId]").count() == 0
    screenshot(page, "journey-viewer-designer")
    viewer.check("viewer")

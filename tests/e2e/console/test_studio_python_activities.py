"""A team's Python activities in Elsa Studio, driven through Studio's own UI in headless chromium
on a full stack whose processes load the example package (``examples/order-activities``).

The toolbox lists the example's activities under "Orders"; an author drags Check stock and Price
order in, sets their Sku inputs and Check stock's Quantity to a JavaScript expression, connects
Check stock's custom InStock outcome to Price order, publishes and runs it; the instance viewer
shows the run Finished, and the journal the activities' outputs. Screenshots: ``var/screenshots/``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.console.conftest import (
    StudioStack,
    authoring_studio,
    launched_browser,
    screenshot,
)

pytest.importorskip("order_activities", reason="the example package is not installed")

STUDIO_TIMEOUT_MS = 90_000
NAME = "Order from Studio"
TOOLBOX = ("Check stock", "Price order", "Charge card", "Await shipment")


@pytest.fixture(scope="module")
def studio(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StudioStack]:
    with authoring_studio(tmp_path_factory, "studio-activities") as found:
        yield found


@pytest.fixture(scope="module")
def page(studio: StudioStack) -> Iterator[Any]:
    with launched_browser() as browser:
        context = browser.new_context(
            extra_http_headers={"Authorization": f"ApiKey {studio.keys['designer']}"},
            viewport={"width": 1440, "height": 900},
        )
        opened = context.new_page()
        opened.set_default_timeout(STUDIO_TIMEOUT_MS)
        yield opened


def center(locator: Any) -> tuple[float, float]:
    box = locator.bounding_box()
    assert box is not None
    return box["x"] + box["width"] / 2, box["y"] + box["height"] / 2


def as_javascript(page: Any, description: str, code: str) -> None:
    """Switch the input whose description is ``description`` to JavaScript (its expression menu
    beside it) and type ``code`` into the code editor Studio then shows."""
    row = page.locator("div[role=group].flex-row", has=page.get_by_text(description, exact=True))
    row.last.locator(".mud-menu button").first.click()
    page.locator(".mud-popover-open").get_by_text("JavaScript", exact=True).first.click()
    editor = row.last.locator(".monaco-editor").first
    editor.wait_for()
    editor.click()
    page.keyboard.press("Control+A")  # the editor keeps the literal it had: replace it
    page.keyboard.type(code)
    page.wait_for_timeout(1000)


def fill_input(page: Any, description: str, value: str) -> None:
    """Type ``value`` into the input whose description Studio shows as ``description``."""
    field = page.locator(".mud-input-control", has=page.get_by_text(description, exact=True))
    field.locator("input").first.fill(value)
    field.locator("input").first.press("Tab")


@pytest.mark.timeout(900)
def test_an_author_uses_the_teams_activities_from_the_toolbox_to_a_finished_run(
    studio: StudioStack, page: Any
) -> None:
    # Given a new workflow open in the designer
    page.goto(f"{studio.url}/workflows")
    create = page.get_by_role("button", name="Create workflow")
    page.wait_for_function(
        "[...document.querySelectorAll('button')].some(b => b.innerText.trim().toLowerCase() "
        "== 'create workflow' && !b.disabled)"
    )
    create.click()
    name = page.locator(".mud-dialog .mud-input-control", has_text="Name").locator("input").first
    name.fill(NAME)
    page.locator(".mud-dialog-actions button").last.click()
    page.wait_for_url(re.compile(r"/workflows/[0-9a-f]+$"))
    definition_id = page.url.rsplit("/", 1)[1]
    page.locator(".x6-graph-svg").first.wait_for()

    # When the author opens the toolbox's Orders category, it lists the team's activities
    page.get_by_text("Orders", exact=True).first.click()
    for title in TOOLBOX:
        page.get_by_text(title, exact=True).first.wait_for()
    screenshot(page, "activities-1-toolbox")

    # And drags Check stock and Price order onto the canvas
    canvas = page.locator(".x6-graph-svg").first
    page.get_by_text("Check stock", exact=True).first.drag_to(
        canvas, target_position={"x": 150, "y": 200}
    )
    page.locator(".x6-node").first.wait_for()
    page.get_by_text("Price order", exact=True).first.drag_to(
        canvas, target_position={"x": 520, "y": 200}
    )
    page.wait_for_function("document.querySelectorAll('.x6-node').length == 2")

    # And connects Check stock's InStock outcome (its first port) to Price order
    check, price = page.locator(".x6-node").nth(0), page.locator(".x6-node").nth(1)
    x1, y1 = center(check.locator(".x6-port-body[port-group='out']").first)
    x2, y2 = center(price.locator(".x6-port-body[port-group='in']").first)
    page.mouse.move(x1, y1)
    page.mouse.down()
    page.mouse.move((x1 + x2) / 2, y1 + 30, steps=8)
    page.mouse.move(x2, y2, steps=8)
    page.mouse.up()
    page.wait_for_function("document.querySelectorAll('.x6-edge').length == 1")

    # And sets each one's typed Sku input
    check.click(force=True)  # a freshly dropped node's selection box covers it
    fill_input(page, "The SKU to look up.", "SKU-1")
    as_javascript(page, "How many units the order needs.", "1 + 2")
    page.wait_for_timeout(1000)
    canvas.click(position={"x": 400, "y": 420})  # an empty spot: nothing selected
    page.get_by_text("PriceOrder1", exact=True).first.click()
    fill_input(page, "The SKU to price.", "SKU-1")
    page.wait_for_timeout(1500)  # Studio's auto-save runs on a short debounce
    screenshot(page, "activities-2-designed")

    # When it is published
    page.locator("[role=toolbar] .mud-button-group-root button").first.click()
    page.locator(".mud-snackbar", has_text="Workflow published").first.wait_for()
    status, published = studio.api(
        "GET", f"workflow-definitions/by-definition-id/{definition_id}?versionOptions=Published"
    )
    assert status == 200, published
    nodes = {a["type"]: a for a in published["root"]["activities"]}
    assert set(nodes) == {"Orders.CheckStock", "Orders.PriceOrder"}
    check_stock = nodes["Orders.CheckStock"]
    assert check_stock["sku"]["expression"] == {"type": "Literal", "value": "SKU-1"}
    assert check_stock["quantity"]["expression"] == {"type": "JavaScript", "value": "1 + 2"}
    (connection,) = published["root"]["connections"]
    assert connection["source"]["port"] == "InStock"

    # And run: the instance viewer shows it Finished, with both activities in the journal
    page.locator("[role=toolbar] button").last.click()
    page.wait_for_url(re.compile(r"/workflows/instances/[^/]+/view$"))
    instance_id = page.url.split("/")[-2]
    page.get_by_text("Finished", exact=True).first.wait_for()
    page.get_by_text("Check stock - Completed", exact=True).first.wait_for()
    page.get_by_text("Price order - Completed", exact=True).first.wait_for()
    screenshot(page, "activities-3-instance-viewer")
    # And the journal's entry for Check stock shows its outputs
    page.get_by_text("Check stock - Completed", exact=True).first.click()
    available = page.get_by_text("Available", exact=True).first
    available.scroll_into_view_if_needed()
    # the output's row: its name, then the value the activity returned (10 units of SKU-1)
    assert available.locator("xpath=../..").inner_text().split() == ["Available", "10"]
    screenshot(page, "activities-4-outputs")
    status, journal = studio.api("GET", f"workflow-instances/{instance_id}/journal", role="viewer")
    assert status == 200, journal
    text = str(journal)
    assert "Orders.CheckStock" in text
    assert "InStock" in text

"""The console in a real headless chromium: sign-in, API keys on pages, Studio's files, the
request page with its diagram, 401 and 403. Screenshots go to var/screenshots/."""

from __future__ import annotations

from typing import Any

from tests.e2e.console.conftest import PASSWORD, ConsoleStack, screenshot

STUDIO_BOOT_TIMEOUT_MS = 90_000


def test_a_page_without_credentials_is_401_and_signing_in_opens_studio(
    console_stack: ConsoleStack, browser: Any
) -> None:
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    wasm: list[Any] = []
    page.on("response", lambda r: wasm.append(r) if r.url.endswith(".wasm") else None)
    try:
        # Given no credentials, the definition list answers 401 with the sign-in form
        response = page.goto(f"{console_stack.url}/workflows")
        assert response is not None
        assert response.status == 401
        assert page.locator("input[name=username]").is_visible()
        screenshot(page, "console-sign-in")
        # When alice signs in with her password
        page.fill("input[name=username]", "alice")
        page.fill("input[name=password]", PASSWORD)
        page.click("button[type=submit]")
        page.wait_for_url(f"{console_stack.url}/workflows")
        # Then the page hosts Studio's definition list with a token, and Studio boots
        element = page.locator("elsa-workflow-definition-list")
        assert element.get_attribute("remote-endpoint") == f"{console_stack.url}/elsa/api"
        assert element.get_attribute("access-token")
        assert element.get_attribute("api-key") is None
        page.wait_for_function(
            "document.querySelector('elsa-workflow-definition-list').children.length > 0",
            timeout=STUDIO_BOOT_TIMEOUT_MS,
        )
        assert page.locator("text=alice").first.is_visible()
        screenshot(page, "console-workflows")
        # And every WebAssembly file came as application/wasm, precompressed
        assert wasm, "Studio loaded no .wasm file"
        for item in wasm:
            headers = item.all_headers()
            assert item.status in (200, 304), item.url
            if item.status == 200:
                assert headers["content-type"] == "application/wasm", item.url
                assert headers.get("content-encoding") in ("br", "gzip"), item.url
                assert "immutable" in headers["cache-control"], item.url
    finally:
        context.close()


def test_an_api_key_header_opens_pages(console_stack: ConsoleStack, browser: Any) -> None:
    context = browser.new_context(extra_http_headers=console_stack.header("viewer"))
    page = context.new_page()
    try:
        response = page.goto(f"{console_stack.url}/requests")
        assert response is not None
        assert response.status == 200
        assert page.locator(f"a[href='/requests/{console_stack.request_id}']").is_visible()
        assert page.locator(".role").inner_text() == "viewer"
    finally:
        context.close()


def test_the_request_page_draws_the_workflow_with_the_executed_path(
    console_stack: ConsoleStack, browser: Any
) -> None:
    context = browser.new_context(
        extra_http_headers=console_stack.header("operator"), viewport={"width": 1280, "height": 900}
    )
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    scripts: list[Any] = []
    page.on("response", lambda r: scripts.append(r) if "mermaid.min.js" in r.url else None)
    try:
        response = page.goto(f"{console_stack.url}/requests/{console_stack.request_id}")
        assert response is not None
        assert response.status == 200
        page.wait_for_selector("body[data-diagram=rendered]", timeout=30_000)
        assert errors == []
        # mermaid.js came from this console, compressed
        [script] = scripts
        assert script.url == f"{console_stack.url}/console-assets/mermaid/mermaid.min.js"
        assert script.all_headers().get("content-encoding") == "gzip"
        # The diagram is an SVG with a node per activity; the ones that ran are marked
        svg = page.locator("pre.mermaid svg")
        assert svg.count() == 1
        assert page.locator("pre.mermaid svg g.node").count() >= 10
        executed = page.locator("pre.mermaid svg g.node.executed")
        assert executed.count() == 4
        assert page.locator("pre.mermaid svg g.node.faulted").count() == 1
        assert page.locator("#request-status").inner_text() == "Faulted"
        assert page.locator("#audit").is_visible()
        assert page.locator("#journal tbody tr").count() == 4
        screenshot(page, "console-request")
    finally:
        context.close()


def test_pages_refuse_401_without_and_403_below_the_role(
    console_stack: ConsoleStack, browser: Any
) -> None:
    anonymous = browser.new_context()
    viewer = browser.new_context(extra_http_headers=console_stack.header("viewer"))
    try:
        page = anonymous.new_page()
        for path in ("/requests", f"/requests/{console_stack.request_id}", "/runtime"):
            response = page.goto(console_stack.url + path)
            assert response is not None, path
            assert response.status == 401, path
        wrong = browser.new_context(extra_http_headers={"Authorization": "ApiKey bk_wrong"})
        try:
            refused = wrong.new_page().goto(f"{console_stack.url}/requests")
            assert refused is not None
            assert refused.status == 401
        finally:
            wrong.close()
        # A viewer sees the runtime but no button, and a forged form post is 403
        page = viewer.new_page()
        page.goto(f"{console_stack.url}/runtime")
        assert page.locator("#runtime-toggle").count() == 0
        forbidden = page.request.post(f"{console_stack.url}/runtime/pause")
        assert forbidden.status == 403
        replay = page.request.post(
            f"{console_stack.url}/dead-letters/dl-{console_stack.request_id}/replay"
        )
        assert replay.status == 403
        # And nothing changed
        page.goto(f"{console_stack.url}/runtime")
        assert page.locator("#runtime-state").inner_text() == "running"
        screenshot(page, "console-runtime-viewer")
    finally:
        anonymous.close()
        viewer.close()


def test_the_printed_sign_in_url_signs_in_with_the_key_in_its_fragment(
    console_stack: ConsoleStack, browser: Any
) -> None:
    # Given the URL `make run` prints: the key travels in the fragment, never sent to the server
    context = browser.new_context()
    page = context.new_page()
    sent: list[str] = []
    page.on("request", lambda r: sent.append(r.url))
    try:
        page.goto(f"{console_stack.url}/sign-in#key={console_stack.keys['operator']}")
        # Then the page signs in by itself and lands on the definition list
        page.wait_for_url(f"{console_stack.url}/workflows")
        assert page.locator(".role").inner_text() == "operator"
        assert all(console_stack.keys["operator"] not in url for url in sent)
        assert console_stack.keys["operator"] not in page.url
    finally:
        context.close()

"""Studio's files: MIME types, precompressed twins, cache headers, and life without Studio."""

from __future__ import annotations

import shutil

import pytest
from flask.testing import FlaskClient

from broker.console import assets
from broker.settings import Settings
from tests.unit.console.conftest import Keys

WASM = "/_framework/Elsa.Api.Client.mbze71icf3.wasm"
RUNTIME = "/_framework/dotnet.runtime.v06hirbjsv.js"


def test_wasm_is_application_wasm_and_brotli_when_accepted(client: FlaskClient) -> None:
    response = client.get(WASM, headers={"Accept-Encoding": "gzip, deflate, br"})
    assert response.status_code == 200
    assert response.headers["Content-Type"] == "application/wasm"
    assert response.headers["Content-Encoding"] == "br"
    assert response.data == b"\0asm-br"
    assert "Accept-Encoding" in response.headers["Vary"]


def test_gzip_is_used_when_brotli_is_not_accepted(client: FlaskClient) -> None:
    response = client.get(RUNTIME, headers={"Accept-Encoding": "gzip"})
    assert response.headers["Content-Encoding"] == "gzip"
    assert response.data == b"gz-bytes"
    assert response.mimetype == "text/javascript"


def test_the_plain_file_goes_out_without_accept_encoding_or_twin(client: FlaskClient) -> None:
    plain = client.get(RUNTIME)
    assert "Content-Encoding" not in plain.headers
    assert plain.data == b"// runtime"
    no_twin = client.get("/_framework/icudt.oh1zvcfom8.dat", headers={"Accept-Encoding": "br"})
    assert "Content-Encoding" not in no_twin.headers
    assert no_twin.headers["Content-Type"] == "application/octet-stream"


def test_fingerprinted_files_are_cached_for_a_year_others_revalidated(client: FlaskClient) -> None:
    fingerprinted = client.get(WASM).headers["Cache-Control"]
    assert "max-age=31536000" in fingerprinted
    assert "immutable" in fingerprinted
    boot = client.get("/_framework/blazor.webassembly.js")
    assert boot.headers["Cache-Control"] == "no-cache"
    assert boot.headers["ETag"]
    again = client.get(
        "/_framework/blazor.webassembly.js", headers={"If-None-Match": boot.headers["ETag"]}
    )
    assert again.status_code == 304


@pytest.mark.parametrize(
    "path",
    [
        "/_framework/../../etc/passwd",
        "/_framework/%2e%2e/.integrity",
        f"{WASM}.br",
        "/_framework/missing.js",
    ],
)
def test_nothing_outside_the_package_or_by_twin_name(client: FlaskClient, path: str) -> None:
    assert client.get(path).status_code == 404


def test_css_and_appsettings(client: FlaskClient) -> None:
    css = client.get("/_content/MudBlazor/MudBlazor.min.css")
    assert css.mimetype == "text/css"
    backend = client.get("/appsettings.json").get_json()
    assert backend == {"Backend": {"Url": "http://localhost/elsa/api"}}


def test_files_need_no_credentials_but_pages_do(client: FlaskClient) -> None:
    assert client.get(WASM).status_code == 200
    assert client.get("/workflows").status_code == 401


def test_without_studio_the_page_says_how_to_install_it(
    client: FlaskClient, keys: Keys, console_settings: Settings
) -> None:
    shutil.rmtree(assets.folder(console_settings, assets.STUDIO))
    page = client.get("/workflows", headers=keys.header("viewer")).get_data(as_text=True)
    assert assets.INSTALL_HINT in page
    assert "<elsa-workflow-definition-list" not in page
    assert client.get(WASM).status_code == 404


def test_without_mermaid_the_request_page_shows_the_diagram_source(
    client: FlaskClient, keys: Keys, console_settings: Settings, invoice_request: str
) -> None:
    shutil.rmtree(assets.folder(console_settings, assets.MERMAID))
    page = client.get(f"/requests/{invoice_request}", headers=keys.header("viewer"))
    text = page.get_data(as_text=True)
    assert 'id="diagram-source">flowchart TD' in text
    assert "mermaid.js is not installed" in text

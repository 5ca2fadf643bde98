"""``workflow-definitions/import-files``, advertised in the list's links, works as Studio's import
calls it (issue 34, finding 7): multipart ``files``, JSON files and zips of them, each a draft;
bounded, checked whole before anything is saved."""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Callable
from typing import Any

from flask.testing import FlaskClient

from tests.support.workflows import deep_definition_text

Client = Callable[[str | None], FlaskClient]
API = "/elsa/api/workflow-definitions"


def definition(definition_id: str, name: str | None = None) -> dict[str, Any]:
    return {
        "$schema": "https://elsaworkflows.io/schemas/workflow-definition/v3.0.0/schema.json",
        "definitionId": definition_id,
        "name": name or definition_id,
        "isPublished": True,
        "root": {"id": "flow", "type": "Elsa.Flowchart", "activities": [], "connections": []},
    }


def zipped(entries: dict[str, str]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, text in entries.items():
            archive.writestr(name, text)
    return buffer.getvalue()


def post_files(client: FlaskClient, *files: tuple[bytes, str, str]) -> Any:
    """Multipart ``files`` parts as Refit sends Studio's ``StreamPart`` list."""
    data = {"files": [(io.BytesIO(raw), name, mimetype) for raw, name, mimetype in files]}
    return client.post(f"{API}/import-files", data=data, content_type="multipart/form-data")


def latest_names(client: FlaskClient) -> set[str]:
    listed = client.get(f"{API}?versionOptions=Latest").get_json()
    return {item["definitionId"] for item in listed["items"]}


def test_the_advertised_import_files_link_imports_json_files_and_zips(client_as: Client) -> None:
    designer = client_as("designer")
    # Given the link Studio reads from the definition list
    links = designer.get(API).get_json()["links"]
    assert {
        "href": "/workflow-definitions/import-files",
        "rel": "import-files",
        "method": "POST",
    } in links
    # When a JSON file and a zip of two more (and a stray readme) are posted to it
    one = json.dumps(definition("imported-one")).encode()
    archive = zipped(
        {
            "imported-two.json": json.dumps(definition("imported-two")),
            "nested/imported-three.json": json.dumps(definition("imported-three")),
            "README.txt": "not a definition",
        }
    )
    answer = post_files(
        designer,
        (one, "imported-one.json", "application/json"),
        (archive, "workflow-definitions.zip", "application/x-zip-compressed"),
    )
    # Then all three are imported as drafts (Elsa imports files without publishing them)
    assert answer.status_code == 200, answer.get_json()
    assert answer.get_json() == {"count": 3}
    assert {"imported-one", "imported-two", "imported-three"} <= latest_names(designer)
    draft = designer.get(f"{API}/by-definition-id/imported-two?versionOptions=Latest").get_json()
    assert draft["isPublished"] is False


def test_one_refused_file_imports_nothing(client_as: Client) -> None:
    designer = client_as("designer")
    good = json.dumps(definition("would-be-imported")).encode()
    bad = zipped({"broken.json": '{"definitionId": "broken", "root": '})
    answer = post_files(
        designer, (good, "good.json", "application/json"), (bad, "bad.zip", "application/zip")
    )
    assert answer.status_code == 400, answer.get_json()
    assert "bad.zip/broken.json" in json.dumps(answer.get_json())
    assert "would-be-imported" not in latest_names(designer)


def test_a_deep_definition_in_a_zip_is_refused_by_its_nesting(client_as: Client) -> None:
    designer = client_as("designer")
    deep = zipped({"deep.json": deep_definition_text(950)})
    answer = post_files(designer, (deep, "deep.zip", "application/zip"))
    assert answer.status_code == 400
    assert "nesting exceeds" in json.dumps(answer.get_json())


def test_a_zip_entry_that_unpacks_past_the_limit_is_refused(client_as: Client) -> None:
    # Given a zip of a few kilobytes whose entry unpacks to 5 MB
    designer = client_as("designer")
    bomb = zipped({"bomb.json": '{"definitionId": "bomb", "name": "' + "a" * 5_000_000 + '"}'})
    assert len(bomb) < 100_000
    answer = post_files(designer, (bomb, "bomb.zip", "application/zip"))
    assert answer.status_code == 413, answer.get_json()
    assert "bomb" not in latest_names(designer)


def test_import_files_is_for_designers(client_as: Client) -> None:
    one = json.dumps(definition("viewer-try")).encode()
    answer = post_files(client_as("viewer"), (one, "viewer-try.json", "application/json"))
    assert answer.status_code == 403


def test_a_post_without_files_is_a_400(client_as: Client) -> None:
    answer = client_as("designer").post(f"{API}/import-files", data={})
    assert answer.status_code == 400

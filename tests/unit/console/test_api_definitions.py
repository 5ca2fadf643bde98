"""Workflow definition routes of the Elsa API: list, get, save, publish, export."""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient

from broker.registry import WorkflowRegistry

Client = Callable[[str | None], FlaskClient]
API = "/elsa/api/workflow-definitions"


@pytest.fixture
def console_database(database_url: str) -> str:
    """These routes touch the store: every test runs on SQLite and on PostgreSQL."""
    return database_url


def test_list_shows_the_shipped_workflows_with_latest_and_published(
    client_as: Client,
) -> None:
    response = client_as("viewer").get(f"{API}?versionOptions=Latest&Page=0&PageSize=10")
    assert response.status_code == 200
    body = response.get_json()
    assert set(body) >= {"items", "totalCount"}
    by_id = {s["definitionId"]: s for s in body["items"]}
    invoice = by_id["invoice-process"]
    assert invoice["isLatest"] is True
    assert invoice["isPublished"] is True
    assert invoice["version"] >= 1
    assert invoice["name"] == "Invoice process"


def test_by_definition_id_answers_the_model_with_its_root(client_as: Client) -> None:
    body = client_as("viewer").get(f"{API}/by-definition-id/invoice-process").get_json()
    assert body["definitionId"] == "invoice-process"
    assert body["root"]["type"] == "Elsa.Flowchart"
    assert body["isPublished"] is True
    missing = client_as("viewer").get(f"{API}/by-definition-id/nope")
    assert missing.status_code == 404


def studio_model(client: FlaskClient) -> dict[str, Any]:
    found: dict[str, Any] = client.get(f"{API}/by-definition-id/invoice-process").get_json()
    return found


def test_save_makes_a_draft_and_publish_writes_version_n_plus_1(
    client_as: Client, workflow_dir: Path, registry: WorkflowRegistry
) -> None:
    # Given the shipped invoice workflow at version N
    designer = client_as("designer")
    model = studio_model(designer)
    n = model["version"]
    model["description"] = "Changed in Studio"
    # When Studio saves it
    saved = designer.post(API, json={"model": model})
    assert saved.status_code == 200, saved.get_json()
    draft = saved.get_json()["workflowDefinition"]
    # Then the latest version is an unpublished draft N+1 and the registry still serves N
    assert (draft["version"], draft["isLatest"], draft["isPublished"]) == (
        n + 1,
        True,
        False,
    )
    assert registry.get_definition("invoice-process").version == n  # type: ignore[union-attr]
    # When it is published
    published = designer.post(f"{API}/invoice-process/publish", json={})
    assert published.status_code == 200, published.get_json()
    body = published.get_json()["workflowDefinition"]
    assert (body["version"], body["isPublished"]) == (n + 1, True)
    # Then the folder's file holds N+1 and the registry serves it
    on_disk = json.loads((workflow_dir / "invoice-process.json").read_text())
    assert on_disk["version"] == n + 1
    assert on_disk["description"] == "Changed in Studio"
    assert registry.get_definition("invoice-process").version == n + 1  # type: ignore[union-attr]


def test_a_viewer_cannot_save(client_as: Client, workflow_dir: Path) -> None:
    before = (workflow_dir / "invoice-process.json").read_bytes()
    viewer = client_as("viewer")
    response = viewer.post(API, json={"model": studio_model(viewer), "publish": True})
    assert response.status_code == 403
    assert (workflow_dir / "invoice-process.json").read_bytes() == before


def test_a_publish_taking_another_request_type_is_refused_and_changes_nothing(
    client_as: Client, workflow_dir: Path
) -> None:
    designer = client_as("designer")
    model = studio_model(designer)
    model["definitionId"] = "copy-of-invoice"
    before = sorted(p.name for p in workflow_dir.iterdir())
    response = designer.post(API, json={"model": model, "publish": True})
    assert response.status_code == 400
    body = response.get_json()
    assert body["statusCode"] == 400
    assert "already served by definition 'invoice-process'" in body["errors"]["generalErrors"][0]
    assert sorted(p.name for p in workflow_dir.iterdir()) == before
    assert designer.get(f"{API}/by-definition-id/copy-of-invoice").status_code == 404


def test_export_is_the_file_elsa_exports(client_as: Client) -> None:
    response = client_as("viewer").get(f"{API}/invoice-process/export")
    assert response.status_code == 200
    assert "attachment" in response.headers["Content-Disposition"]
    assert (
        "workflow-definition-invoice-process-invoice-process-"
        in response.headers["Content-Disposition"]
    )
    body = json.loads(response.data)
    assert next(iter(body)) == "$schema"
    assert body["definitionId"] == "invoice-process"


def test_the_designer_gets_node_ids_versions_and_positions(client_as: Client) -> None:
    # Given the shipped file, which has no designer metadata
    root = client_as("viewer").get(f"{API}/by-definition-id/invoice-process").get_json()["root"]
    nodes = root["activities"]
    # Then every node has a node id under its flowchart, a version and a distinct position
    assert all(n["nodeId"] == f"flow:{n['id']}" for n in nodes)
    assert all(n["version"] == 1 for n in nodes)
    positions = [
        (
            n["metadata"]["designer"]["position"]["x"],
            n["metadata"]["designer"]["position"]["y"],
        )
        for n in nodes
    ]
    assert len(set(positions)) == len(nodes)
    start = next(n for n in nodes if n["id"] == "receive")
    assert start["metadata"]["designer"]["position"]["x"] == 0


def test_only_a_designer_gets_the_publish_link(client_as: Client) -> None:
    def rels(role: str) -> set[str]:
        body = client_as(role).get(f"{API}/by-definition-id/invoice-process").get_json()
        return {link["rel"] for link in body["links"]}

    # Studio opens a definition read-only without a publish link
    assert "publish" not in rels("viewer")
    assert "publish" in rels("designer")


def test_retract_unpublishes_and_keeps_the_content_as_a_draft(
    client_as: Client, workflow_dir: Path, registry: WorkflowRegistry
) -> None:
    assert client_as("viewer").post(f"{API}/invoice-process/retract").status_code == 403
    designer = client_as("designer")
    response = designer.post(f"{API}/invoice-process/retract", json={})
    assert response.status_code == 200, response.get_json()
    body = response.get_json()
    assert (body["definitionId"], body["isPublished"], body["isLatest"]) == (
        "invoice-process",
        False,
        True,
    )
    assert body["description"] == studio_model(designer)["description"]
    # The file is gone and the registry no longer serves it
    assert not (workflow_dir / "invoice-process.json").exists()
    assert registry.get_definition("invoice-process") is None
    # A second retract is refused: nothing is published
    again = designer.post(f"{API}/invoice-process/retract")
    assert again.status_code == 400
    assert "is not published" in again.get_json()["errors"]["generalErrors"][0]
    assert designer.post(f"{API}/nope/retract").status_code == 404


def test_delete_removes_the_file_and_the_draft(
    client_as: Client, workflow_dir: Path, registry: WorkflowRegistry
) -> None:
    designer = client_as("designer")
    assert designer.post(API, json={"model": studio_model(designer)}).status_code == 200
    assert client_as("viewer").delete(f"{API}/invoice-process").status_code == 403
    assert (workflow_dir / "invoice-process.json").exists()
    response = designer.delete(f"{API}/invoice-process")
    assert response.status_code == 204
    assert not (workflow_dir / "invoice-process.json").exists()
    assert registry.get_definition("invoice-process") is None
    assert designer.get(f"{API}/by-definition-id/invoice-process").status_code == 404
    assert designer.delete(f"{API}/invoice-process").status_code == 404


def exported(client: FlaskClient) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(client.get(f"{API}/invoice-process/export").data)
    return found


def test_import_of_an_exported_published_file_publishes_the_next_version(
    client_as: Client, workflow_dir: Path, registry: WorkflowRegistry
) -> None:
    designer = client_as("designer")
    document = exported(designer)
    n = document["version"]
    document["description"] = "Imported"
    response = designer.post(f"{API}/import", json=document)
    assert response.status_code == 200, response.get_json()
    body = response.get_json()
    assert (body["version"], body["isPublished"], body["description"]) == (
        n + 1,
        True,
        "Imported",
    )
    assert json.loads((workflow_dir / "invoice-process.json").read_text())["version"] == n + 1
    assert registry.get_definition("invoice-process").version == n + 1  # type: ignore[union-attr]


def test_import_of_an_unpublished_model_is_a_draft_and_a_new_one_is_created(
    client_as: Client, workflow_dir: Path
) -> None:
    designer = client_as("designer")
    document = exported(designer)
    n = document["version"]
    before = designer.get(f"{API}/query/count").get_json()["count"]
    document.update(isPublished=False, name="Draft via PUT")
    # PUT {definitionId}/import: the path names the definition
    put = designer.put(f"{API}/invoice-process/import", json={**document, "definitionId": "x"})
    assert put.status_code == 200, put.get_json()
    assert (put.get_json()["version"], put.get_json()["isPublished"]) == (n + 1, False)
    assert put.get_json()["definitionId"] == "invoice-process"
    # A model without a definition id is a new definition: 201 and a fresh id
    fresh = {k: v for k, v in document.items() if k not in ("definitionId", "id")}
    fresh["customProperties"] = {}
    created = designer.post(f"{API}/import", json=fresh)
    assert created.status_code == 201, created.get_json()
    new_id = created.get_json()["definitionId"]
    assert new_id
    assert new_id != "invoice-process"
    assert designer.get(f"{API}/by-definition-id/{new_id}").status_code == 200
    assert designer.get(f"{API}/query/count").get_json() == {"count": before + 1}


def test_an_import_that_would_not_register_is_refused_and_changes_nothing(
    client_as: Client, workflow_dir: Path
) -> None:
    designer = client_as("designer")
    document = exported(designer)
    document["definitionId"] = "other-invoices"  # the same request type, another definition
    before = sorted(p.name for p in workflow_dir.iterdir())
    response = designer.post(f"{API}/import", json=document)
    assert response.status_code == 400
    assert "already served" in response.get_json()["errors"]["generalErrors"][0]
    assert sorted(p.name for p in workflow_dir.iterdir()) == before
    assert designer.get(f"{API}/by-definition-id/other-invoices").status_code == 404
    assert client_as("viewer").post(f"{API}/import", json=document).status_code == 403


def test_versions_and_many_by_id(client_as: Client) -> None:
    designer = client_as("designer")
    published = studio_model(designer)
    assert designer.post(API, json={"model": published}).status_code == 200
    versions = designer.get(f"{API}/invoice-process/versions")
    assert versions.status_code == 200
    listed = versions.get_json()
    assert [v["version"] for v in listed] == [
        published["version"] + 1,
        published["version"],
    ]
    assert [v["isPublished"] for v in listed] == [False, True]
    assert designer.get(f"{API}/nope/versions").status_code == 404
    ids = [v["id"] for v in listed]
    many = designer.get(f"{API}/many-by-id?ids={ids[0]}&ids={ids[1]}&ids=unknown").get_json()
    assert many["count"] == 2
    assert {m["id"] for m in many["items"]} == set(ids)


def test_is_name_unique_and_count(client_as: Client, workflow_dir: Path) -> None:
    viewer = client_as("viewer")
    url = f"{API}/validation/is-name-unique"
    assert viewer.get(f"{url}?name=Invoice%20process").get_json() == {"isUnique": False}
    assert viewer.get(f"{url}?name=invoice%20PROCESS%20").get_json() == {"isUnique": False}
    own = viewer.get(f"{url}?name=Invoice%20process&definitionId=invoice-process")
    assert own.get_json() == {"isUnique": True}
    assert viewer.get(f"{url}?name=Something%20new").get_json() == {"isUnique": True}
    missing = viewer.get(url)
    assert missing.status_code == 400
    assert "'name'" in missing.get_json()["errors"]["generalErrors"][0]
    # one definition per shipped workflow file
    shipped = len(list(workflow_dir.glob("*.json")))
    assert viewer.get(f"{API}/query/count").get_json() == {"count": shipped}


def test_a_publish_taking_another_workflows_http_endpoint_is_refused_as_elsa_words_it(
    client_as: Client, workflow_dir: Path
) -> None:
    # Given a new definition whose HttpEndpoint serves a path and method a published one serves
    designer = client_as("designer")
    first = designer.post(f"{API}/import", json=endpoint_workflow("first-endpoint")).get_json()
    assert designer.post(f"{API}/{first['definitionId']}/publish").status_code == 200
    second = designer.post(f"{API}/import", json=endpoint_workflow("second-endpoint")).get_json()
    # When it is published, Then it is refused with Elsa's message and stays unpublished
    refused = designer.post(f"{API}/{second['definitionId']}/publish")
    assert refused.status_code == 400
    assert refused.get_json()["errors"]["generalErrors"] == [
        "The /same/path path and get method are already in use by another workflow!"
    ]
    published = designer.get(f"{API}/by-definition-id/second-endpoint?versionOptions=Published")
    assert published.status_code == 404


def endpoint_workflow(definition_id: str) -> dict[str, Any]:
    return {
        "definitionId": definition_id,
        "name": definition_id,
        "root": {
            "id": "flow",
            "type": "Elsa.Flowchart",
            "activities": [
                {
                    "id": "endpoint",
                    "type": "Elsa.HttpEndpoint",
                    "customProperties": {"canStartWorkflow": True},
                    "path": {
                        "typeName": "String",
                        "expression": {"type": "Literal", "value": "same/path"},
                    },
                    "supportedMethods": {
                        "typeName": "String[]",
                        "expression": {"type": "Object", "value": '["GET"]'},
                    },
                }
            ],
            "connections": [],
        },
    }


def graph_file(definition_id: str, *, uses: str | None = None) -> dict[str, Any]:
    """A definition usable as an activity; ``uses``: a definition it runs as an activity."""
    activities: list[dict[str, Any]] = []
    if uses is not None:
        activities.append({"id": "use", "type": "Used", "workflowDefinitionId": uses})
    return {
        "id": f"{definition_id}-v1",
        "definitionId": definition_id,
        "name": definition_id,
        "version": 1,
        "isPublished": True,
        "options": {"usableAsActivity": True},
        "root": {"id": "flow", "type": "Elsa.Flowchart", "activities": activities},
    }


def test_consumers_are_the_workflows_using_a_definition_directly_or_through_others(
    client_as: Client, workflow_dir: Path, registry: WorkflowRegistry
) -> None:
    # Given leaf <- middle <- top (each uses the one before as an activity)
    for name, uses in (("leaf", None), ("middle", "leaf"), ("top", "middle")):
        (workflow_dir / f"{name}.json").write_text(json.dumps(graph_file(name, uses=uses)))
    registry.load()
    viewer = client_as("viewer")
    # Then the leaf's consumers are both, the top's none, and an unknown definition is 404
    found = viewer.get(f"{API}/leaf/consumers").get_json()
    assert found == {"consumingWorkflowDefinitionIds": ["middle", "top"]}
    assert viewer.get(f"{API}/top/consumers").get_json()["consumingWorkflowDefinitionIds"] == []
    assert viewer.get(f"{API}/nowhere/consumers").status_code == 404
    # And an export with consumers is a zip of the three, without them the leaf's JSON alone
    zipped = viewer.get(f"{API}/leaf/export?includeConsumingWorkflows=true")
    assert zipped.mimetype == "application/zip"
    with zipfile.ZipFile(io.BytesIO(zipped.data)) as archive:
        ids = sorted(json.loads(archive.read(n))["definitionId"] for n in archive.namelist())
    assert ids == ["leaf", "middle", "top"]
    assert viewer.get(f"{API}/leaf/export").get_json()["definitionId"] == "leaf"


def test_a_read_only_definition_is_neither_imported_over_nor_saved(
    client_as: Client, workflow_dir: Path, registry: WorkflowRegistry
) -> None:
    # Given a read-only definition's file
    document = {**graph_file("locked"), "isReadonly": True}
    (workflow_dir / "locked.json").write_text(json.dumps(document))
    registry.load()
    designer = client_as("designer")
    before = (workflow_dir / "locked.json").read_bytes()
    # When it is imported over or saved, Then 403 and nothing changes
    imported = designer.post(f"{API}/import", json={"definitionId": "locked", "name": "New"})
    assert imported.status_code == 403
    saved = designer.post(API, json={"model": {"definitionId": "locked", "name": "New"}})
    assert saved.status_code == 403
    assert (workflow_dir / "locked.json").read_bytes() == before
    model = designer.get(f"{API}/by-definition-id/locked").get_json()
    assert (model["name"], model["isReadonly"]) == ("locked", True)

"""What Studio's screens read and call beyond the basic routes: the list's links, Studio's null
options, bulk actions, versions, execution state and the Test tab (issue 24)."""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient

Client = Callable[[str | None], FlaskClient]
API = "/elsa/api/workflow-definitions"
BULK = "/elsa/api/bulk-actions"


@pytest.fixture
def console_database(database_url: str) -> str:
    return database_url


def rels(links: list[dict[str, str]]) -> set[str]:
    return {link["rel"] for link in links}


def new_workflow(client: FlaskClient, name: str, **model: Any) -> str:
    """A draft as Studio's create dialog saves it (Studio's nulls included)."""
    body = {
        "model": {
            "name": name,
            "options": {"usableAsActivity": None, "activityCategory": None},
            "usableAsActivity": None,
            "root": None,
            **model,
        },
        "publish": False,
    }
    response = client.post(API, json=body)
    assert response.status_code == 200, response.get_json()
    return str(response.get_json()["workflowDefinition"]["definitionId"])


def test_the_list_carries_write_links_only_for_a_designer(client_as: Client) -> None:
    # Studio turns the list read-only without a bulk-publish link, a row without a publish link
    viewer = client_as("viewer").get(f"{API}?versionOptions=Latest").get_json()
    designer = client_as("designer").get(f"{API}?versionOptions=Latest").get_json()
    assert "bulk-publish" not in rels(viewer["links"])
    assert all("publish" not in rels(item["links"]) for item in viewer["items"])
    assert {"bulk-publish", "bulk-retract", "bulk-delete-by-definition-id", "create"} <= rels(
        designer["links"]
    )
    assert all("publish" in rels(item["links"]) for item in designer["items"])


def test_studios_null_options_publish_as_defaults(client_as: Client, workflow_dir: Path) -> None:
    # Given a workflow created as Studio's dialog saves it, usableAsActivity and category null
    designer = client_as("designer")
    definition_id = new_workflow(designer, "Null options")
    # When it is published
    response = designer.post(f"{API}/{definition_id}/publish", json={})
    # Then it is, and the file carries no null option
    assert response.status_code == 200, response.get_json()
    (path,) = [p for p in workflow_dir.glob("*.json") if definition_id in p.read_text()]
    options = json.loads(path.read_text()).get("options") or {}
    assert None not in options.values()


def test_bulk_publish_retract_and_delete_by_definition_id(client_as: Client) -> None:
    designer = client_as("designer")
    first, second = new_workflow(designer, "Bulk one"), new_workflow(designer, "Bulk two")
    body = {"definitionIds": [first, second, "nowhere"]}
    published = designer.post(f"{BULK}/publish/workflow-definitions/by-definition-ids", json=body)
    assert published.status_code == 200
    assert sorted(published.get_json()["published"]) == sorted([first, second])
    assert published.get_json()["notFound"] == ["nowhere"]
    again = designer.post(f"{BULK}/publish/workflow-definitions/by-definition-ids", json=body)
    assert sorted(again.get_json()["alreadyPublished"]) == sorted([first, second])
    retracted = designer.post(f"{BULK}/retract/workflow-definitions/by-definition-ids", json=body)
    assert sorted(retracted.get_json()["retracted"]) == sorted([first, second])
    status = designer.get(f"{API}/by-definition-id/{first}?versionOptions=Published").status_code
    assert status == 404
    deleted = designer.post(f"{BULK}/delete/workflow-definitions/by-definition-id", json=body)
    assert deleted.get_json() == {"deleted": 2}
    assert designer.get(f"{API}/by-definition-id/{first}").status_code == 404


def test_bulk_actions_refuse_a_viewer_and_a_malformed_body(client_as: Client) -> None:
    path = f"{BULK}/publish/workflow-definitions/by-definition-ids"
    body = {"definitionIds": ["invoice-process"]}
    assert client_as("viewer").post(path, json=body).status_code == 403
    refused = client_as("designer").post(path, json={"definitionIds": "invoice-process"})
    assert refused.status_code == 400
    assert "definitionIds" in json.dumps(refused.get_json())


def test_bulk_export_zips_the_export_files(client_as: Client) -> None:
    new_workflow(client_as("designer"), "Exported")
    viewer = client_as("viewer")
    items = viewer.get(f"{API}?versionOptions=Latest").get_json()["items"]
    ids = [i["id"] for i in items[:2]]
    assert len(ids) == 2
    response = viewer.post(f"{BULK}/export/workflow-definitions", json={"ids": ids})
    assert response.status_code == 200
    assert response.mimetype == "application/zip"
    with zipfile.ZipFile(io.BytesIO(response.data)) as archive:
        names = archive.namelist()
        documents = [json.loads(archive.read(n)) for n in names]
    assert len(names) == 2
    assert {d["id"] for d in documents} == set(ids)


def test_revert_makes_an_older_version_the_draft_and_only_a_draft_can_be_deleted(
    client_as: Client,
) -> None:
    designer = client_as("designer")
    definition_id = new_workflow(designer, "Reverted")
    designer.post(f"{API}/{definition_id}/publish", json={})
    latest = designer.get(f"{API}/by-definition-id/{definition_id}").get_json()
    latest["name"] = "Reverted, second"
    designer.post(API, json={"model": latest, "publish": True})
    # When version 1 is reverted to
    response = designer.post(f"{API}/{definition_id}/revert/1")
    # Then the draft (version 3) holds version 1's content
    assert response.status_code == 201, response.get_json()
    assert response.get_json()["version"] == 3
    draft = designer.get(f"{API}/by-definition-id/{definition_id}").get_json()
    assert draft["name"] == "Reverted"
    assert draft["isPublished"] is False
    # A stored version stays; the draft can be deleted
    published = designer.get(f"{API}/by-definition-id/{definition_id}?versionOptions=1").get_json()
    refused = designer.delete(f"/elsa/api/workflow-definition-versions/{published['id']}")
    assert refused.status_code == 400
    assert "version history" in json.dumps(refused.get_json())
    assert (
        designer.delete(f"/elsa/api/workflow-definition-versions/{draft['id']}").status_code == 204
    )
    after = designer.get(f"{API}/by-definition-id/{definition_id}").get_json()
    assert after["version"] == 2


def test_the_test_tab_gets_a_faulted_status_with_the_reason(client_as: Client) -> None:
    body = {
        "workflowDefinitionHandle": {"definitionVersionId": "x"},
        "activityHandle": {"activityNodeId": "y"},
    }
    response = client_as("designer").post("/elsa/api/tests/activities", json=body)
    assert response.status_code == 200
    assert response.get_json()["status"] == "Faulted"
    assert "not supported" in response.get_json()["exception"]["message"]


def test_execution_state_of_an_unknown_instance_is_404(client_as: Client) -> None:
    response = client_as("viewer").get("/elsa/api/workflow-instances/nope/execution-state")
    assert response.status_code == 404


def test_a_viewers_run_says_it_cannot_start(client_as: Client) -> None:
    response = client_as("viewer").post(f"{API}/invoice-process/execute", json={})
    assert response.status_code == 403
    assert response.headers["x-elsa-workflow-cannot-start"] == "True"


def test_a_fault_without_a_recorded_incident_is_the_incidents_tabs_incident() -> None:
    from broker.console.api.instances.routes import incidents_of

    fault = {"activity_id": "boom", "message": "it broke", "code": "Fault"}
    assert incidents_of({"fault": fault, "incidents": []}) == [fault]
    recorded = {"activity_id": "other", "message": "first"}
    assert incidents_of({"fault": fault, "incidents": [recorded]}) == [recorded]
    assert incidents_of({"fault": None}) == []

"""Studio's script editor asks for the TypeScript declarations of a workflow's scripts."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from flask.testing import FlaskClient

from broker.engine.expr.jsapi import HELPERS

API = "/elsa/api/scripting/javascript/type-definitions"
Client = Callable[[str | None], FlaskClient]


def test_type_definitions_declare_every_helper_and_the_workflows_variables(
    client_as: Client, workflow_dir: Path
) -> None:
    # Given the shipped invoice workflow and its variables
    document = json.loads((workflow_dir / "invoice-process.json").read_text())
    names = [v["name"] for v in document["variables"]]
    # When Studio's script editor asks for its declarations
    response = client_as("viewer").post(
        f"{API}/invoice-process",
        json={"workflowDefinitionId": "invoice-process", "activityTypeName": "Elsa.RunJavaScript"},
    )
    # Then they come as a TypeScript file naming every helper and every variable
    assert response.status_code == 200, response.get_data(as_text=True)
    assert response.mimetype == "application/x-typescript"
    assert "elsa.invoice-process.d.ts" in response.headers["Content-Disposition"]
    text = response.get_data(as_text=True)
    missing = [helper.name for helper in HELPERS if helper.name not in text]
    assert not missing
    assert names
    assert all(name in text for name in names)


def test_type_definitions_need_a_known_definition_and_a_role(client_as: Client) -> None:
    assert client_as(None).post(f"{API}/invoice-process", json={}).status_code == 401
    assert client_as("viewer").post(f"{API}/nope", json={}).status_code == 404
    bad = client_as("viewer").post(f"{API}/invoice-process", json={"activityTypeName": 3})
    assert bad.status_code == 400

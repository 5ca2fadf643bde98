"""The JSON state of a workflow instance: its shape, its version, its scopes and the ids it
derives."""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from broker.errors import WorkflowFault

FORMAT_VERSION = 1

# Children (ExecuteWorkflow, DispatchWorkflow) get ids derived from their parent's, in this space.
_CHILD_NAMESPACE = uuid.UUID("6f1d1b52-8a8e-4c57-9d1e-2f0c3a5b7e11")


def new_state(
    *,
    instance_id: str,
    definition_id: str,
    definition_version_id: str,
    version: int,
    name: str,
    input: Mapping[str, Any] | None,
    correlation_id: str | None,
    parent_id: str | None,
    flowchart_mode: str,
    incident_strategy: str,
    properties: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "formatVersion": FORMAT_VERSION,
        "instanceId": instance_id,
        "definitionId": definition_id,
        "definitionVersionId": definition_version_id,
        "version": version,
        "name": name,
        "correlationId": correlation_id,
        "parentId": parent_id,
        "status": "Running",
        "subStatus": "Executing",
        "flowchartMode": flowchart_mode,
        "incidentStrategy": incident_strategy,
        "input": dict(input or {}),
        "properties": dict(properties or {}),
        "nextId": 0,
        "contexts": {},
        "queue": [],
        "bookmarks": [],
        "activityOutputs": {},
        "output": {},
        "httpResponse": None,
        "httpContext": None,
        "incidents": [],
        "fault": None,
        "retry": None,
        "rootContextId": None,
    }


def migrate(state: Mapping[str, Any]) -> dict[str, Any]:
    """Bring a stored state up to ``FORMAT_VERSION`` (one function per older version)."""
    version = state.get("formatVersion")
    if version == FORMAT_VERSION:
        return dict(state)
    raise WorkflowFault(f"unsupported workflow state formatVersion {version!r}")


def activity_instance_id(instance_id: str, counter: int) -> str:
    return hashlib.sha256(f"{instance_id}:{counter}".encode()).hexdigest()[:16]


def child_instance_id(parent_instance_id: str, activity_instance_id: str, index: int = 0) -> str:
    """The id a child instance gets, chosen before it is dispatched (so retries reuse it)."""
    return uuid.uuid5(_CHILD_NAMESPACE, f"{parent_instance_id}:{activity_instance_id}:{index}").hex


def canonical_json(payload: Any) -> str:
    return json.dumps(payload, sort_keys=True, separators=(",", ":"), default=str)


def bookmark_hash(name: str, payload: Any, activity_instance_id: str) -> str:
    """SHA-256 hex of name + JSON payload + activity instance id (unique per bookmark)."""
    text = f"{name}{canonical_json(payload)}{activity_instance_id}"
    return hashlib.sha256(text.encode()).hexdigest()


def stimulus_hash(name: str, payload: Any) -> str:
    """SHA-256 hex of name + JSON payload: what a stimulus and its waiting bookmarks share."""
    return hashlib.sha256(f"{name}{canonical_json(payload)}".encode()).hexdigest()


def new_scope(
    variables: Iterable[Any],
    *,
    kind: str,
    values: Mapping[str, Any] | None = None,
    inputs: Mapping[str, Any] | None = None,
    outputs: Iterable[str] = (),
) -> dict[str, Any]:
    """A JSON scope: variable values by name, ids to names, and (workflow) inputs/outputs."""
    scope: dict[str, Any] = {"kind": kind, "vars": {}, "ids": {}}
    for variable in variables:
        scope["vars"][variable.name] = (values or {}).get(variable.name)
        scope["ids"][variable.id] = variable.name
    if kind == "workflow":
        scope["inputs"] = dict(inputs or {})
        scope["outputs"] = {}
        scope["declaredOutputs"] = list(outputs)
        scope["outcomes"] = None
    return scope

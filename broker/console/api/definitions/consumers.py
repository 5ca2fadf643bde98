"""The workflow reference graph: which definitions use a definition as an activity, directly or
through others (Elsa's consumers endpoint), and exports that bring those consumers along."""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from flask import Response

from broker.console.api.base import blueprint
from broker.console.api.definitions.routes import by_version_id, one, registry
from broker.console.api.definitions.views import (
    Version,
    all_versions,
    export_document,
    export_file_name,
)
from broker.console.api.params import VersionOptions
from broker.console.roles import require
from broker.ingress.context import transaction

ZIP_NAME = "workflow-definitions.zip"


def _nodes(node: Any) -> Iterator[Mapping[str, Any]]:
    if isinstance(node, Mapping):
        if isinstance(node.get("type"), str):
            yield node
        for value in node.values():
            yield from _nodes(value)
    elif isinstance(node, list):
        for value in node:
            yield from _nodes(value)


def _activity_type(document: Mapping[str, Any]) -> str:
    """The type a definition has as an activity: its name without spaces (as Elsa names it)."""
    return "".join(str(document.get("name") or "").split())


def references(document: Mapping[str, Any], types: Mapping[str, str]) -> set[str]:
    """The definition ids a document uses as activities: a node's ``workflowDefinitionId``, or
    its type when that is another definition's activity type (``types``: type -> id)."""
    found = set()
    for node in _nodes(document.get("root")):
        target = node.get("workflowDefinitionId")
        if isinstance(target, str) and target:
            found.add(target)
        elif node["type"] in types:
            found.add(types[node["type"]])
    found.discard(str(document.get("definitionId")))
    return found


def _latest_documents() -> dict[str, dict[str, Any]]:
    """Each definition's latest version (a draft included), by definition id."""
    with transaction(write=False) as session:
        versions = all_versions(session, registry())
    return {
        definition_id: max(found, key=lambda v: v.version).document
        for definition_id, found in versions.items()
        if found
    }


def consumers_of(definition_ids: Iterable[str]) -> list[str]:
    """The definitions that use any of ``definition_ids`` as an activity, transitively, sorted
    (the given ones left out)."""
    documents = _latest_documents()
    types = {
        _activity_type(doc): definition_id
        for definition_id, doc in documents.items()
        if (doc.get("options") or {}).get("usableAsActivity") and _activity_type(doc)
    }
    used_by: dict[str, set[str]] = {}
    for definition_id, doc in documents.items():
        for target in references(doc, types):
            used_by.setdefault(target, set()).add(definition_id)
    start = set(definition_ids)
    seen: set[str] = set()
    pending = list(start)
    while pending:
        for consumer in used_by.get(pending.pop(), ()):
            if consumer not in seen and consumer not in start:
                seen.add(consumer)
                pending.append(consumer)
    return sorted(seen)


@blueprint.get("/workflow-definitions/<definition_id>/consumers")
@require("viewer")
def list_consumers(definition_id: str) -> dict[str, Any]:
    one(definition_id, VersionOptions("Latest"))  # 404 for an unknown definition
    return {"consumingWorkflowDefinitionIds": consumers_of([definition_id])}


def zip_response(versions: Iterable[Version]) -> Response:
    """Elsa's ``workflow-definitions.zip``: one export file per version."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for v in versions:
            body = json.dumps(export_document(v), indent=2, ensure_ascii=False)
            archive.writestr(export_file_name(v), body)
    return Response(
        buffer.getvalue(),
        mimetype="application/zip",
        headers={"Content-Disposition": f'attachment; filename="{ZIP_NAME}"'},
    )


def with_consumers(versions: list[Version]) -> list[Version]:
    """The versions, then the latest version of each definition that consumes one of them."""
    known = {v.definition_id for v in versions}
    extra = [
        one(d, VersionOptions("Latest")) for d in consumers_of(known) if d not in known
    ]
    return versions + extra


def versions_by_id(version_ids: Iterable[str]) -> list[Version]:
    return [by_version_id(version_id) for version_id in version_ids]

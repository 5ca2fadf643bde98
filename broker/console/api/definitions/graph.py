"""The workflow reference graph: which definitions use a definition as an activity, directly or
through others (Elsa's consumers), and the zip Elsa exports several definitions in."""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from flask import Response

from broker.console.api.definitions.views import Version, export_document, export_file_name

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


def consumers_of(
    documents: Mapping[str, Mapping[str, Any]], definition_ids: Iterable[str]
) -> list[str]:
    """Of ``documents`` (each definition's latest, by id), those that use any of
    ``definition_ids`` as an activity, transitively, sorted (the given ones left out)."""
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

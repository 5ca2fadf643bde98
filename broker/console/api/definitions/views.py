"""Workflow definitions as Elsa Studio sees them: the registry's versions plus Studio drafts
(docs/design.md, section 1)."""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

from sqlalchemy.orm import Session

from broker.console.api.definitions.designer import for_designer
from broker.registry import WorkflowRegistry
from broker.runtime.admin import drafts as store
from broker.runtime.requests.queries import iso

SCHEMA = "https://elsaworkflows.io/schemas/workflow-definition/v3.0.0/schema.json"
DRAFT_PREFIX = "draft:"


@dataclasses.dataclass(frozen=True)
class Version:
    id: str
    definition_id: str
    version: int
    name: str | None
    created_at: dt.datetime | None
    is_latest: bool
    is_published: bool
    is_draft: bool
    document: dict[str, Any] = dataclasses.field(repr=False)

    @property
    def description(self) -> str | None:
        value = self.document.get("description")
        return value if isinstance(value, str) else None


def draft_version_id(definition_id: str) -> str:
    return DRAFT_PREFIX + definition_id


def all_versions(
    session: Session, registry: WorkflowRegistry, only: set[str] | None = None
) -> dict[str, list[Version]]:
    """Every definition's versions, oldest first (``only``: these definition ids)."""
    loaded = {d.definition_id: d for d in registry.definitions()}
    drafts = {d.definition_id: d for d in store.drafts(session)}
    ids = set(loaded) | set(drafts)
    if only is not None:
        ids &= only
    stored: dict[str, list[store.StoredVersion]] = {}
    for row in store.versions_of(session, ids):
        stored.setdefault(row.definition_id, []).append(row)
    found: dict[str, list[Version]] = {}
    for definition_id in sorted(ids):
        served = registry.get_definition(definition_id) if definition_id in loaded else None
        published_id = served.version_id if served is not None and served.published else None
        draft = drafts.get(definition_id)
        rows = stored.get(definition_id, [])
        versions = [
            Version(
                id=r.id,
                definition_id=definition_id,
                version=r.version,
                name=r.name,
                created_at=r.created_at,
                is_latest=r.is_latest and draft is None,
                is_published=r.id == published_id,
                is_draft=False,
                document=r.document,
            )
            for r in rows
        ]
        if draft is not None:
            versions.append(
                Version(
                    id=draft_version_id(definition_id),
                    definition_id=definition_id,
                    version=max((r.version for r in rows), default=0) + 1,
                    name=draft.name,
                    created_at=draft.updated_at,
                    is_latest=True,
                    is_published=False,
                    is_draft=True,
                    document=draft.document,
                )
            )
        if versions:
            found[definition_id] = versions
    return found


def summary(v: Version) -> dict[str, Any]:
    """Elsa's ``WorkflowDefinitionSummary``."""
    return {
        "id": v.id,
        "definitionId": v.definition_id,
        "name": v.name,
        "description": v.description,
        "version": v.version,
        "toolVersion": v.document.get("toolVersion"),
        "isLatest": v.is_latest,
        "isPublished": v.is_published,
        "providerName": None,
        "materializerName": "Json",
        "createdAt": iso(v.created_at),
        "isReadonly": v.document.get("isReadonly") is True,
    }


def links(definition_id: str, *, writable: bool) -> list[dict[str, str]]:
    """Elsa's HATEOAS links; Studio opens a definition read-only without a ``publish`` link."""
    base = f"/workflow-definitions/{definition_id}"
    found = [
        {"href": base, "rel": "self", "method": "GET"},
        {
            "href": f"/workflow-definitions/by-definition-id/{definition_id}",
            "rel": "self",
            "method": "GET",
        },
        {"href": f"{base}/versions", "rel": "versions", "method": "GET"},
        {"href": f"{base}/dispatch", "rel": "dispatch", "method": "POST"},
        {"href": f"{base}/execute", "rel": "execute", "method": "POST"},
        {"href": f"{base}/export", "rel": "export", "method": "POST"},
    ]
    if writable:
        found += [
            {"href": f"{base}/publish", "rel": "publish", "method": "POST"},
            {"href": f"{base}/retract", "rel": "retract", "method": "POST"},
            {"href": base, "rel": "delete", "method": "DELETE"},
            {"href": f"{base}/import", "rel": "import", "method": "PUT"},
        ]
    return found


def list_links(*, writable: bool) -> list[dict[str, str]]:
    """The list page's links: Studio turns the list read-only without ``bulk-publish``."""
    found = [
        {"href": "/workflow-definitions", "rel": "self", "method": "GET"},
        {
            "href": "/workflow-definitions/validation/is-name-unique",
            "rel": "is-name-unique",
            "method": "GET",
        },
        {"href": "/workflow-definitions/query/count", "rel": "count", "method": "GET"},
        {"href": "/workflow-definitions/many-by-id", "rel": "many-by-id", "method": "GET"},
    ]
    if writable:
        bulk = "/bulk-actions"
        found += [
            {
                "href": f"{bulk}/delete/workflow-definitions/by-definition-id",
                "rel": "bulk-delete-by-definition-id",
                "method": "POST",
            },
            {
                "href": f"{bulk}/delete/workflow-definitions/by-id",
                "rel": "bulk-delete-by-id",
                "method": "POST",
            },
            {
                "href": f"{bulk}/publish/workflow-definitions/by-definition-ids",
                "rel": "bulk-publish",
                "method": "POST",
            },
            {
                "href": f"{bulk}/retract/workflow-definitions/by-definition-ids",
                "rel": "bulk-retract",
                "method": "POST",
            },
            {"href": "/workflow-definitions/import", "rel": "import", "method": "POST"},
            {"href": "/workflow-definitions/import-files", "rel": "import-files", "method": "POST"},
            {"href": "/workflow-definitions", "rel": "create", "method": "POST"},
        ]
    return found


def linked(v: Version, *, writable: bool) -> dict[str, Any]:
    """The model with its links, as the API answers it (never in an exported file)."""
    return {**model(v), "links": links(v.definition_id, writable=writable)}


def model(v: Version) -> dict[str, Any]:
    """Elsa's ``WorkflowDefinitionModel`` (the designer's document and the export file)."""
    doc = v.document
    options = doc.get("options") if isinstance(doc.get("options"), dict) else {}
    return {
        "id": v.id,
        "definitionId": v.definition_id,
        "tenantId": None,
        "name": v.name,
        "description": v.description,
        "createdAt": iso(v.created_at),
        "version": v.version,
        "toolVersion": doc.get("toolVersion"),
        "variables": doc.get("variables") or [],
        "inputs": doc.get("inputs") or [],
        "outputs": doc.get("outputs") or [],
        "outcomes": doc.get("outcomes") or [],
        "customProperties": doc.get("customProperties") or {},
        "isReadonly": doc.get("isReadonly") is True,
        "isSystem": False,
        "isLatest": v.is_latest,
        "isPublished": v.is_published,
        "options": options,
        "usableAsActivity": (options or {}).get("usableAsActivity"),
        "root": for_designer(doc.get("root")),
    }


def export_document(v: Version) -> dict[str, Any]:
    """The file Elsa's export writes: ``$schema`` first, then the model."""
    return {"$schema": SCHEMA, **model(v)}


def export_file_name(v: Version) -> str:
    """Elsa's ``workflow-definition-<name slug>-<definition id>-<version id>.json``."""
    name = (v.name or "").strip() or v.definition_id
    slug = "-".join(name.replace("_", "-").split()).lower()
    part = f"{slug}-{v.definition_id}-{v.id}"
    safe = "".join("-" if c in '/\\:*?"<>|' or ord(c) < 32 else c for c in part)
    return f"workflow-definition-{safe}.json"

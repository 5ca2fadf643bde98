"""Workflow definition routes: list, get, save (draft), publish, retract, versions, export."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

from flask import Response

from broker.console.api.base import blueprint, workflow_registry
from broker.console.api.definitions import graph
from broker.console.api.definitions.views import (
    Version,
    all_versions,
    export_document,
    linked,
    links,
    list_links,
    summary,
)
from broker.console.api.openapi import (
    DEFINITION,
    FLAG,
    PAGING,
    TEXT,
    TEXTS,
    documented,
    json_object,
)
from broker.console.api.params import VersionOptions, arg, args, body_object, page_args
from broker.console.roles import allows, current, require
from broker.errors import BadRequest, ConfigError, Forbidden, NotFound
from broker.registry import WorkflowRegistry
from broker.registry.files import MAX_NAME
from broker.registry.publishing import check, publish_document, remove_file, target_path
from broker.runtime.admin import drafts as store
from broker.web.context import services, transaction

ORDER_KEYS = {"created": "created", "name": "name", "version": "version"}
DEFAULT_ROOT_TYPE = "Elsa.Flowchart"


def writable() -> bool:
    """True when the caller may save, publish and delete (Studio offers those only then)."""
    principal = current()
    return principal is not None and allows(principal.role, "designer")


def model(v: Version) -> dict[str, Any]:
    """The linked model: with write links only for a principal who may save and publish."""
    return linked(v, writable=writable())


def registry() -> WorkflowRegistry:
    return workflow_registry()


def first_folder() -> Path:
    paths = services().settings.workflow_paths
    if not paths:
        raise ConfigError("no workflow folder is configured (BROKER_WORKFLOW_PATHS)")
    return Path(paths[0])


def select(versions: list[Version], options: VersionOptions) -> list[Version]:
    if options.name == "LatestOrPublished":
        return [v for v in versions if v.is_latest or v.is_published]
    return [
        v
        for v in versions
        if options.matches(version=v.version, is_latest=v.is_latest, is_published=v.is_published)
    ]


def one(definition_id: str, options: VersionOptions) -> Version:
    with transaction(write=False) as session:
        versions = all_versions(session, registry(), {definition_id}).get(definition_id, [])
    chosen = select(versions, options)
    if options.name == "LatestOrPublished":
        latest = [v for v in chosen if v.is_latest]
        chosen = latest or chosen
    if not chosen:
        raise NotFound(f"Workflow definition '{definition_id}' ({options.name}) not found")
    return max(chosen, key=lambda v: v.version)


def by_version_id(version_id: str) -> Version:
    with transaction(write=False) as session:
        for versions in all_versions(session, registry()).values():
            for v in versions:
                if v.id == version_id:
                    return v
    raise NotFound(f"Workflow definition version '{version_id}' not found")


@blueprint.get("/workflow-definitions")
@require("viewer")
@documented(
    query={
        "versionOptions": TEXT,
        "searchTerm": TEXT,
        "definitionIds": TEXTS,
        "ids": TEXTS,
        "isSystem": TEXT,
        "orderBy": TEXT,
        "orderDirection": TEXT,
        **PAGING,
    }
)
def list_definitions() -> dict[str, Any]:
    raw = arg("versionOptions")
    options = VersionOptions.parse(raw, "AllVersions")
    term = (arg("searchTerm") or "").lower()
    definition_ids = set(args("definitionIds")) or None
    ids = set(args("ids"))
    page_links = list_links(writable=writable())
    if (arg("isSystem") or "").lower() == "true":
        return {"items": [], "totalCount": 0, "links": page_links}
    with transaction(write=False) as session:
        everything = all_versions(session, registry(), definition_ids)
    found = [v for versions in everything.values() for v in select(versions, options)]
    if ids:
        found = [v for v in found if v.id in ids]
    if term:
        found = [
            v
            for v in found
            if term in (v.name or "").lower()
            or term in (v.description or "").lower()
            or term in v.definition_id.lower()
        ]
    order = (arg("orderBy") or "Name").lower()
    if order not in ORDER_KEYS:
        raise BadRequest(f"'orderBy' must be Created, Name or Version, not {arg('orderBy')!r}")
    direction = (
        arg("orderDirection") or ("Ascending" if order == "name" else "Descending")
    ).lower()
    if direction not in ("ascending", "descending"):
        raise BadRequest("'orderDirection' must be Ascending or Descending")
    keys = {
        "name": lambda v: ((v.name or v.definition_id).lower(), v.version),
        "version": lambda v: (v.version, v.definition_id),
        "created": lambda v: (
            v.created_at.isoformat() if v.created_at else "",
            v.version,
        ),
    }
    found.sort(key=keys[order], reverse=direction == "descending")
    total = len(found)
    if arg("page") is not None or arg("pageSize") is not None:
        paging = page_args()
        found = found[paging.offset : paging.offset + paging.page_size]
    items = [{**summary(v), "links": links(v.definition_id, writable=writable())} for v in found]
    return {"items": items, "totalCount": total, "links": page_links}


@blueprint.get("/workflow-definitions/by-definition-id/<definition_id>")
@require("viewer")
@documented(query={"versionOptions": TEXT})
def get_by_definition_id(definition_id: str) -> dict[str, Any]:
    return model(one(definition_id, VersionOptions.parse(arg("versionOptions"), "Latest")))


@blueprint.get("/workflow-definitions/by-id/<version_id>")
@require("viewer")
def get_by_id(version_id: str) -> dict[str, Any]:
    return model(by_version_id(version_id))


@blueprint.get("/workflow-definitions/many-by-id")
@require("viewer")
@documented(query={"ids": TEXTS})
def get_many_by_id() -> dict[str, Any]:
    wanted = set(args("ids"))
    with transaction(write=False) as session:
        everything = all_versions(session, registry())
    found = [model(v) for vs in everything.values() for v in vs if v.id in wanted]
    return {"items": found, "count": len(found)}


@blueprint.get("/workflow-definitions/<definition_id>/versions")
@require("viewer")
def list_versions(definition_id: str) -> Response:
    with transaction(write=False) as session:
        versions = all_versions(session, registry(), {definition_id}).get(definition_id, [])
    if not versions:
        raise NotFound(f"Workflow definition '{definition_id}' not found")
    body = [model(v) for v in sorted(versions, key=lambda v: v.version, reverse=True)]
    return Response(json.dumps(body), mimetype="application/json")


@blueprint.get("/workflow-definitions/validation/is-name-unique")
@require("viewer")
@documented(query={"name": TEXT, "definitionId": TEXT})
def is_name_unique() -> dict[str, Any]:
    name = (arg("name") or "").strip().lower()
    if not name:
        raise BadRequest("'name' is required")
    definition_id = arg("definitionId")
    with transaction(write=False) as session:
        everything = all_versions(session, registry())
    # As Elsa's store: any version of another definition with that name.
    taken = any(
        (v.name or "").strip().lower() == name
        for d, vs in everything.items()
        if d != definition_id
        for v in vs
    )
    return {"isUnique": not taken}


@blueprint.get("/workflow-definitions/problems")
@require("viewer")
def list_problems() -> dict[str, Any]:
    """The workflow files the registry refused, each with the reason (one bad file is refused
    alone: every other definition is served)."""
    items = [{"file": p.file, "reason": p.reason} for p in registry().shown_problems()]
    return {"items": items, "count": len(items)}


@blueprint.get("/workflow-definitions/query/count")
@require("viewer")
def count_definitions() -> dict[str, Any]:
    with transaction(write=False) as session:
        return {"count": len(all_versions(session, registry()))}


# Writing --------------------------------------------------------------------------------------


def draft_document(data: dict[str, Any]) -> dict[str, Any]:
    """The document a save stores, from Studio's ``model`` (checked field by field)."""
    definition_id = data.get("definitionId") or uuid.uuid4().hex[:16]
    if not isinstance(definition_id, str) or not definition_id.strip():
        raise BadRequest("'model.definitionId' must be a non-empty string")
    if len(definition_id.strip()) > MAX_NAME:
        raise BadRequest(f"'model.definitionId' is longer than {MAX_NAME} characters")
    doc: dict[str, Any] = {"definitionId": definition_id.strip()}
    for key in ("name", "description", "toolVersion"):
        value = data.get(key)
        if value is not None and not isinstance(value, str):
            raise BadRequest(f"'model.{key}' must be a string")
        if value is not None:
            doc[key] = value.strip()
    for key in ("variables", "inputs", "outputs", "outcomes"):
        value = data.get(key)
        if value is not None and not isinstance(value, list):
            raise BadRequest(f"'model.{key}' must be a list")
        doc[key] = value or []
    for key in ("customProperties", "options"):
        value = data.get(key)
        if value is not None and not isinstance(value, dict):
            raise BadRequest(f"'model.{key}' must be an object")
        doc[key] = value or {}
    # Studio sends every option it has a field for, null when the author left it alone; null is
    # Elsa's "use the default", so it is not stored (a file carries only what was chosen).
    doc["options"] = {k: v for k, v in doc["options"].items() if v is not None}
    usable = data.get("usableAsActivity")
    if usable is not None and "usableAsActivity" not in doc["options"]:
        if not isinstance(usable, bool):
            raise BadRequest("'model.usableAsActivity' must be true or false")
        doc["options"]["usableAsActivity"] = usable
    root = data.get("root")
    if root is None:
        root = {
            "type": DEFAULT_ROOT_TYPE,
            "id": uuid.uuid4().hex[:16],
            "version": 1,
            "activities": [],
            "connections": [],
        }
    if not isinstance(root, dict) or not isinstance(root.get("type"), str):
        raise BadRequest("'model.root' must be an activity object with a type")
    doc["root"] = root
    return doc


def file_document(version: Version, number: int) -> dict[str, Any]:
    """The file a publish writes: the export shape, with a new version id and number."""
    doc = export_document(version)
    doc.update(id=uuid.uuid4().hex, version=number, isLatest=True, isPublished=True)
    for key in ("createdAt", "tenantId"):
        doc.pop(key, None)
    return doc


def publish_definition(definition_id: str) -> tuple[Version, bool]:
    """Publish a definition's draft; (the published version, whether it already was)."""
    latest = one(definition_id, VersionOptions("Latest"))
    if not latest.is_draft:
        return latest, latest.is_published
    with transaction(write=False) as session:
        number = store.highest_version(session, definition_id) + 1
    published = publish_document(registry(), first_folder(), file_document(latest, number))
    with transaction() as session:
        store.delete_draft_txn(session, definition_id)
    return one(published.definition_id, VersionOptions("Published")), False


def latest_documents() -> dict[str, dict[str, Any]]:
    """Each definition's latest version (a draft included), by definition id."""
    with transaction(write=False) as session:
        versions = all_versions(session, registry())
    return {
        definition_id: max(found, key=lambda v: v.version).document
        for definition_id, found in versions.items()
        if found
    }


def with_consumers(versions: list[Version]) -> list[Version]:
    """The versions, then the latest version of each definition that consumes one of them."""
    known = {v.definition_id for v in versions}
    found = graph.consumers_of(latest_documents(), known)
    return versions + [one(d, VersionOptions("Latest")) for d in found if d not in known]


def refuse_read_only(definition_id: str) -> None:
    """Elsa's read-only definitions (``isReadonly`` in their file) are not changed by a save or
    an import: ``403``, and nothing is stored."""
    current_version = registry().get_definition(definition_id, published=False)
    if current_version is not None and current_version.document.get("isReadonly") is True:
        raise Forbidden(f"Workflow definition '{definition_id}' is read-only")


def save_response(v: Version, *, already: bool = False) -> dict[str, Any]:
    return {
        "workflowDefinition": model(v),
        "alreadyPublished": already,
        "consumingWorkflowCount": 0,
        "validationErrors": [],
    }


@blueprint.post("/workflow-definitions")
@require("designer")
@documented(body=json_object({"model": DEFINITION, "publish": FLAG}, ("model",)))
def save_definition() -> dict[str, Any]:
    data = body_object(definition=True, wrapped=True)
    raw_model = data.get("model")
    if not isinstance(raw_model, dict):
        raise BadRequest("'model' must be a workflow definition object")
    publish = data.get("publish")
    if publish is not None and not isinstance(publish, bool):
        raise BadRequest("'publish' must be true or false")
    doc = draft_document(raw_model)
    definition_id = doc["definitionId"]
    refuse_read_only(definition_id)
    principal = current()
    if publish:
        # Checked before anything is stored: a refused publish changes nothing.
        path = target_path(registry(), first_folder(), definition_id)
        check(registry(), {**doc, "version": 1}, path)
    with transaction() as session:
        store.save_draft_txn(session, definition_id, doc, principal.name if principal else None)
    if publish:
        v, _ = publish_definition(definition_id)
        return save_response(v)
    return save_response(one(definition_id, VersionOptions("Latest")))


@blueprint.post("/workflow-definitions/<definition_id>/publish")
@require("designer")
def publish(definition_id: str) -> dict[str, Any]:
    v, already = publish_definition(definition_id)
    return save_response(v, already=already)


def retract_definition(definition_id: str) -> Version:
    """Unload a published definition (its content stays as the draft); the latest version."""
    published = one(definition_id, VersionOptions("LatestOrPublished"))
    if not published.is_published:
        raise BadRequest(f"Workflow with id {definition_id} is not published")
    with transaction(write=False) as session:
        has_draft = store.draft(session, definition_id) is not None
    if not has_draft:
        # The content stays editable as a draft once its file is gone.
        doc = {k: v for k, v in published.document.items() if k not in ("id", "version")}
        with transaction() as session:
            store.save_draft_txn(session, definition_id, doc, acting_user())
    if not remove_file(registry(), first_folder(), definition_id):
        raise BadRequest(
            f"Workflow {definition_id} is published from a folder the console does not manage"
        )
    return one(definition_id, VersionOptions("Latest"))


@blueprint.post("/workflow-definitions/<definition_id>/retract")
@require("designer")
def retract(definition_id: str) -> dict[str, Any]:
    return model(retract_definition(definition_id))


def acting_user() -> str | None:
    principal = current()
    return principal.name if principal else None


def delete_one(definition_id: str) -> None:
    """Remove a definition: its file from the console's folder and its draft (404 when unknown)."""
    one(definition_id, VersionOptions("AllVersions"))  # 404 when unknown
    current_file = registry().get_definition(definition_id, published=False)
    if current_file is not None and not remove_file(registry(), first_folder(), definition_id):
        raise BadRequest(
            f"Workflow {definition_id} is published from a folder the console does not manage"
        )
    with transaction() as session:
        store.delete_draft_txn(session, definition_id)


@blueprint.delete("/workflow-definitions/<definition_id>")
@require("designer")
def delete_definition(definition_id: str) -> tuple[str, int]:
    delete_one(definition_id)
    return "", 204

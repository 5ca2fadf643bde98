"""Elsa's bulk actions: publish, retract, delete and export definitions; cancel and delete
instances."""

from __future__ import annotations

from typing import Any

from flask import Response

from broker.console import audit
from broker.console.api.base import blueprint
from broker.console.api.definitions import graph
from broker.console.api.definitions.routes import (
    by_version_id,
    delete_one,
    publish_definition,
    retract_definition,
    with_consumers,
)
from broker.console.api.openapi import (
    TEXT,
    TEXTS,
    documented,
    json_object,
)
from broker.console.api.params import body_object
from broker.console.roles import require
from broker.errors import BadRequest, BrokerError, Conflict, NotFound
from broker.runtime.admin import instance_queries as queries
from broker.runtime.admin import instances as admin_instances
from broker.runtime.admin.enums import InstanceStatus
from broker.safety.bounded import unstorable_text
from broker.store.operator_actions import targets
from broker.web.context import transaction

BULK = "/bulk-actions"
#: the most instances one bulk action over a definition touches
MAX_BULK = 1000


#: the longest id a bulk action takes (the widest id column)
MAX_ID = 200


def id_list(name: str) -> list[str]:
    """A list of ids from the JSON body's ``name`` (each a non-empty string), duplicates once."""
    ids = _optional_ids(body_object(), name)
    if not ids:
        raise BadRequest(f"'{name}' must be a list of ids", field=name)
    return ids


def _audit(action: str, ids: list[str], summary: dict[str, Any]) -> None:
    """One operator-audit record of a bulk action, after it ran (its own transaction)."""
    with transaction() as session:
        audit.record(session, action, targets(ids), summary)


@blueprint.post(f"{BULK}/publish/workflow-definitions/by-definition-ids")
@require("designer")
@documented(body=json_object({"definitionIds": TEXTS}, ("definitionIds",)))
def bulk_publish() -> dict[str, Any]:
    published: list[str] = []
    already: list[str] = []
    not_found: list[str] = []
    failed: list[str] = []
    warnings: dict[str, list[str]] = {}
    ids = id_list("definitionIds")
    for definition_id in ids:
        try:
            _, was_published = publish_definition(definition_id)
        except NotFound:
            not_found.append(definition_id)
            continue
        except BrokerError as exc:
            failed.append(definition_id)
            warnings[definition_id] = list(exc.details.get("errors") or [exc.message])
            continue
        (already if was_published else published).append(definition_id)
    _audit(
        "bulk.publish-definitions",
        ids,
        {"published": published, "notFound": not_found, "failed": failed},
    )
    return {
        "published": published,
        "alreadyPublished": already,
        "notFound": not_found,
        "skipped": [],
        "updatedConsumers": [],
        "failed": failed,
        "warnings": warnings,
    }


@blueprint.post(f"{BULK}/retract/workflow-definitions/by-definition-ids")
@require("designer")
@documented(body=json_object({"definitionIds": TEXTS}, ("definitionIds",)))
def bulk_retract() -> dict[str, Any]:
    retracted: list[str] = []
    already: list[str] = []
    not_found: list[str] = []
    skipped: list[str] = []
    ids = id_list("definitionIds")
    for definition_id in ids:
        try:
            retract_definition(definition_id)
        except NotFound:
            not_found.append(definition_id)
            continue
        except BadRequest as exc:
            # not published, or published from a folder the console does not manage
            (already if "not published" in exc.message else skipped).append(definition_id)
            continue
        retracted.append(definition_id)
    _audit("bulk.retract-definitions", ids, {"retracted": retracted, "notFound": not_found})
    return {
        "retracted": retracted,
        "alreadyRetracted": already,
        "notPublished": already,
        "notFound": not_found,
        "skipped": skipped,
    }


@blueprint.post(f"{BULK}/delete/workflow-definitions/by-definition-id")
@require("designer")
@documented(body=json_object({"definitionIds": TEXTS}, ("definitionIds",)))
def bulk_delete() -> dict[str, Any]:
    deleted: list[str] = []
    ids = id_list("definitionIds")
    for definition_id in ids:
        try:
            delete_one(definition_id)
        except NotFound:
            continue
        deleted.append(definition_id)
    _audit("bulk.delete-definitions", ids, {"deleted": deleted})
    return {"deleted": len(deleted)}


@blueprint.post(f"{BULK}/delete/workflow-definitions/by-id")
@require("designer")
@documented(body=json_object({"ids": TEXTS}, ("ids",)))
def bulk_delete_versions() -> dict[str, Any]:
    from broker.console.api.definitions.versions import delete_version_txn

    ids = id_list("ids")
    versions = [by_version_id(i) for i in ids]  # all checked first: a refused one changes nothing
    for v in versions:
        if not v.is_draft:
            delete_version_txn(v)  # raises the reason, before anything is deleted
    deleted = sum(delete_version_txn(v) for v in versions)
    _audit("bulk.delete-versions", ids, {"deleted": deleted})
    return {"deleted": deleted}


@blueprint.post(f"{BULK}/export/workflow-definitions")
@require("viewer")
@documented(body=json_object({"ids": TEXTS}, ("ids",)))
def bulk_export() -> Response:
    """A zip of the export files of the given versions (Elsa's ``workflow-definitions.zip``),
    with every workflow that uses one of them when ``includeConsumingWorkflows`` is true."""
    ids = id_list("ids")
    include = body_object().get("includeConsumingWorkflows", False)
    if not isinstance(include, bool):
        raise BadRequest("'includeConsumingWorkflows' must be true or false")
    chosen = [by_version_id(version_id) for version_id in ids]
    return graph.zip_response(with_consumers(chosen) if include else chosen)


# Instances ---------------------------------------------------------------------------------------


def _optional_ids(body: dict[str, Any], name: str) -> list[str]:
    """The ids of ``name`` in the body, each checked before any is acted on (a list of
    non-empty strings of at most ``MAX_ID`` characters, no NUL), duplicates once."""
    raw = body.get(name)
    if raw is None:
        return []
    if not isinstance(raw, list) or not all(isinstance(i, str) and i.strip() for i in raw):
        raise BadRequest(f"'{name}' must be a list of ids", field=name)
    for index, item in enumerate(raw):
        problem = unstorable_text(item)
        if problem is not None or len(item) > MAX_ID:
            why = f"contains {problem}" if problem else f"is longer than {MAX_ID} characters"
            raise BadRequest(f"'{name}[{index}]' {why}", field=f"{name}[{index}]")
    return list(dict.fromkeys(i.strip() for i in raw))


def _text(body: dict[str, Any], name: str) -> str | None:
    value = body.get(name)
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise BadRequest(f"'{name}' must be a non-empty string", field=name)
    return value.strip() if isinstance(value, str) else None


def _instances_of(definition_ids: list[str], version: int | None, status: str) -> list[str]:
    """The ids of the instances of these definitions (one ``version``) in ``status``."""
    found: list[str] = []
    with transaction(write=False) as session:
        for definition_id in definition_ids:
            f = queries.InstanceFilter(
                statuses=(status,), definition_ids=(definition_id,), version=version
            )
            items, _ = queries.page(session, f, offset=0, limit=MAX_BULK)
            found += [str(i["id"]) for i in items]
    return found


@blueprint.post(f"{BULK}/cancel/workflow-instances")
@require("operator")
@documented(body=json_object({"ids": TEXTS, "definitionVersionId": TEXT, "definitionId": TEXT}))
def bulk_cancel_instances() -> dict[str, Any]:
    """Cancel the instances named (``ids``), or the running ones of a definition or version."""
    body = body_object()
    ids = _optional_ids(body, "ids")
    version_id = _text(body, "definitionVersionId")
    definition_id = _text(body, "definitionId")
    if version_id is not None:
        v = by_version_id(version_id)
        ids += _instances_of([v.definition_id], v.version, InstanceStatus.RUNNING.value)
    elif definition_id is not None:
        ids += _instances_of([definition_id], None, InstanceStatus.RUNNING.value)
    cancelled: list[str] = []
    for instance_id in dict.fromkeys(ids):
        try:
            with transaction() as session:
                admin_instances.cancel(session, instance_id)
        except (Conflict, NotFound):
            continue  # already finished or gone: nothing to cancel
        cancelled.append(instance_id)
    _audit("bulk.cancel-instances", list(dict.fromkeys(ids)), {"cancelled": len(cancelled)})
    return {"cancelled": len(cancelled)}


@blueprint.post(f"{BULK}/delete/workflow-instances/by-id")
@require("operator")
@documented(
    body=json_object({"ids": TEXTS, "workflowDefinitionIds": TEXTS, "workflowDefinitionId": TEXT})
)
def bulk_delete_instances() -> dict[str, Any]:
    """Delete the named instances, a running one cancelled first (as Elsa's API does), and the
    finished instances of the given definitions."""
    body = body_object()
    ids = _optional_ids(body, "ids")
    definitions = _optional_ids(body, "workflowDefinitionIds")
    single = _text(body, "workflowDefinitionId")
    if single is not None:
        definitions.append(single)
    ids += _instances_of(definitions, None, InstanceStatus.FINISHED.value)
    deleted: list[str] = []
    for instance_id in dict.fromkeys(ids):
        try:
            with transaction() as session:
                admin_instances.delete(session, instance_id)
        except (Conflict, NotFound):
            continue  # gone, or finished by a racing step (its own save wins)
        deleted.append(instance_id)
    _audit("bulk.delete-instances", list(dict.fromkeys(ids)), {"deleted": len(deleted)})
    return {"deleted": len(deleted)}

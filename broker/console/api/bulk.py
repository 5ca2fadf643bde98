"""Elsa's bulk actions on the definition list: publish, retract, delete and export many."""

from __future__ import annotations

import io
import json
import zipfile
from typing import Any

from flask import Response

from broker.console.api.base import blueprint
from broker.console.api.definition_views import export_document, export_file_name
from broker.console.api.definitions import (
    body_object,
    by_version_id,
    delete_one,
    publish_definition,
    retract_definition,
)
from broker.console.roles import require
from broker.errors import BadRequest, BrokerError, NotFound

BULK = "/bulk-actions"


def id_list(name: str) -> list[str]:
    """A list of ids from the JSON body's ``name`` (each a non-empty string), duplicates once."""
    raw = body_object().get(name)
    if not isinstance(raw, list) or not all(isinstance(i, str) and i.strip() for i in raw):
        raise BadRequest(f"'{name}' must be a list of ids", field=name)
    return list(dict.fromkeys(i.strip() for i in raw))


@blueprint.post(f"{BULK}/publish/workflow-definitions/by-definition-ids")
@require("designer")
def bulk_publish() -> dict[str, Any]:
    published: list[str] = []
    already: list[str] = []
    not_found: list[str] = []
    failed: list[str] = []
    warnings: dict[str, list[str]] = {}
    for definition_id in id_list("definitionIds"):
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
def bulk_retract() -> dict[str, Any]:
    retracted: list[str] = []
    already: list[str] = []
    not_found: list[str] = []
    skipped: list[str] = []
    for definition_id in id_list("definitionIds"):
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
    return {
        "retracted": retracted,
        "alreadyRetracted": already,
        "notPublished": already,
        "notFound": not_found,
        "skipped": skipped,
    }


@blueprint.post(f"{BULK}/delete/workflow-definitions/by-definition-id")
@require("designer")
def bulk_delete() -> dict[str, Any]:
    deleted = 0
    for definition_id in id_list("definitionIds"):
        try:
            delete_one(definition_id)
        except NotFound:
            continue
        deleted += 1
    return {"deleted": deleted}


@blueprint.post(f"{BULK}/delete/workflow-definitions/by-id")
@require("designer")
def bulk_delete_versions() -> dict[str, Any]:
    from broker.console.api.versions import delete_version_txn

    ids = id_list("ids")
    for version_id in ids:  # checked first: a refused version changes nothing
        by_version_id(version_id)
    return {"deleted": sum(delete_version_txn(by_version_id(i)) for i in ids)}


@blueprint.post(f"{BULK}/export/workflow-definitions")
@require("viewer")
def bulk_export() -> Response:
    """A zip of the export files of the given versions (Elsa's ``workflow-definitions.zip``)."""
    ids = id_list("ids")
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for version_id in ids:
            v = by_version_id(version_id)
            body = json.dumps(export_document(v), indent=2, ensure_ascii=False)
            archive.writestr(export_file_name(v), body)
    return Response(
        buffer.getvalue(),
        mimetype="application/zip",
        headers={"Content-Disposition": 'attachment; filename="workflow-definitions.zip"'},
    )

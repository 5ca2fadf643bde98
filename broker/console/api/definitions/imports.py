"""Elsa's export and import of definitions: one file, or ``import-files`` (JSON files and zips of
them as multipart ``files``, each a draft; bounded, all checked before any is saved)."""

from __future__ import annotations

import io
import json
import zipfile
from typing import Any

from flask import Response, request
from werkzeug.datastructures import FileStorage

from broker.console import audit
from broker.console.api.base import blueprint
from broker.console.api.definitions import graph
from broker.console.api.definitions.routes import (
    acting_user,
    draft_document,
    first_folder,
    model,
    one,
    publish_definition,
    refuse_read_only,
    registry,
    with_consumers,
)
from broker.console.api.definitions.views import export_document, export_file_name
from broker.console.api.openapi import DEFINITION, FLAG, TEXT, documented
from broker.console.api.params import VersionOptions, arg, body_object, bool_arg, definition_limits
from broker.console.roles import current, require
from broker.errors import BadRequest, DefinitionRefused, PayloadTooLarge
from broker.registry.publishing import check, target_path
from broker.runtime.admin import drafts as store
from broker.safety.bounded import decode_json
from broker.store.operator_actions import targets
from broker.web.context import services, transaction
from broker.web.inputs import is_json_media_type

#: the most definitions one import takes (files, and entries of zips together)
MAX_DEFINITIONS = 200
#: how many times the request's size the documents of its zips may hold together, unpacked
UNPACKED_FACTOR = 16


def _is_json(part: FileStorage) -> bool:
    name = (part.filename or "").lower()
    return is_json_media_type(part.mimetype or "") or name.endswith(".json")


def _read_capped(stream: Any, limit: int, what: str) -> bytes:
    """At most ``limit`` bytes of ``stream``; ``PayloadTooLarge`` naming ``what`` beyond."""
    raw = stream.read(limit + 1)
    if len(raw) > limit:
        raise PayloadTooLarge(f"{what} exceeds {limit} bytes", limit=limit)
    return bytes(raw)


def _documents(parts: list[FileStorage], limit: int) -> list[tuple[str, bytes]]:
    """(where, JSON bytes) of every definition in the posted files: a JSON file is one; a zip
    holds one per ``.json`` entry (other entries and folders are skipped)."""
    found: list[tuple[str, bytes]] = []
    unpacked = 0
    for part in parts:
        name = part.filename or "file"
        raw = _read_capped(part.stream, limit, name)
        if _is_json(part):
            found.append((name, raw))
            continue
        try:
            archive = zipfile.ZipFile(io.BytesIO(raw))
        except zipfile.BadZipFile:
            raise BadRequest(f"{name} is neither JSON nor a zip", field="files") from None
        with archive:
            for entry in archive.infolist():
                if entry.is_dir() or not entry.filename.lower().endswith(".json"):
                    continue
                if len(found) >= MAX_DEFINITIONS:
                    raise BadRequest(
                        f"An import takes at most {MAX_DEFINITIONS} definitions", field="files"
                    )
                where = f"{name}/{entry.filename}"
                try:
                    with archive.open(entry) as handle:
                        document = _read_capped(handle, limit, where)
                except (zipfile.BadZipFile, NotImplementedError, RuntimeError, OSError) as exc:
                    raise BadRequest(f"{where} cannot be read: {exc}", field="files") from None
                unpacked += len(document)
                if unpacked > limit * UNPACKED_FACTOR:
                    raise PayloadTooLarge(
                        f"The zips unpack to more than {limit * UNPACKED_FACTOR} bytes",
                        limit=limit * UNPACKED_FACTOR,
                    )
                found.append((where, document))
    if len(found) > MAX_DEFINITIONS:
        raise BadRequest(f"An import takes at most {MAX_DEFINITIONS} definitions", field="files")
    return found


def _draft(where: str, raw: bytes, limits: Any) -> dict[str, Any]:
    """The draft one file makes, checked as the JSON import checks its body."""
    try:
        data = decode_json(raw, limits, field=where)
        if not isinstance(data, dict):
            raise BadRequest(f"{where} must hold a JSON object", field="files")
        data.pop("$schema", None)
        return draft_document(data)
    except BadRequest as exc:
        message = exc.message if where in exc.message else f"{where}: {exc.message}"
        raise BadRequest(message, field="files") from None


@blueprint.post("/workflow-definitions/import-files")
@require("designer")
@documented(files=True)
def import_files() -> dict[str, Any]:
    """Import every definition of the posted ``files`` as a draft (Elsa imports files without
    publishing them); all are checked first, so a refused file imports nothing. ``{count}``."""
    settings = services().settings
    parts = [p for key in request.files for p in request.files.getlist(key)]
    if not parts:
        raise BadRequest("Post the files to import as multipart 'files'", field="files")
    limits = definition_limits(settings)
    drafts = [_draft(where, raw, limits) for where, raw in _documents(parts, limits.max_bytes or 0)]
    ids = [d["definitionId"] for d in drafts]
    repeated = sorted({i for i in ids if ids.count(i) > 1})
    if repeated:
        raise DefinitionRefused(
            [f"definitionId '{i}' is in the import more than once" for i in repeated]
        )
    principal = current()
    with transaction() as session:
        for document in drafts:
            saved_by = principal.name if principal is not None else None
            store.save_draft_txn(session, document["definitionId"], document, saved_by)
        audit.record(session, "definition.import-files", targets(ids), {"count": len(ids)})
    return {"count": len(drafts)}


@blueprint.get("/workflow-definitions/<definition_id>/export")
@require("viewer")
@documented(query={"versionOptions": TEXT, "includeConsumingWorkflows": FLAG})
def export(definition_id: str) -> Response:
    v = one(definition_id, VersionOptions.parse(arg("versionOptions"), "Latest"))
    if bool_arg("includeConsumingWorkflows"):
        # Elsa's export with consumers: a zip of the definition and every workflow using it
        return graph.zip_response(with_consumers([v]))
    body = json.dumps(export_document(v), indent=2, ensure_ascii=False)
    return Response(
        body,
        mimetype="application/json",
        headers={"Content-Disposition": f'attachment; filename="{export_file_name(v)}"'},
    )


@blueprint.route("/workflow-definitions/import", methods=["POST", "PUT"])
@blueprint.route("/workflow-definitions/<definition_id>/import", methods=["POST", "PUT"])
@require("designer")
@documented(body=DEFINITION)
def import_definition(definition_id: str | None = None) -> tuple[dict[str, Any], int]:
    """Elsa's import: the model becomes the draft, and is published when it says
    ``isPublished`` (as an exported file does); 201 for a new definition."""
    data = body_object(definition=True)
    data.pop("$schema", None)
    if definition_id is not None:
        data["definitionId"] = definition_id
    is_new = not data.get("definitionId")
    publish_it = data.get("isPublished") is True
    doc = draft_document(data)
    refuse_read_only(doc["definitionId"])
    if publish_it:
        # Checked before anything is stored: a refused import changes nothing.
        path = target_path(registry(), first_folder(), doc["definitionId"])
        check(registry(), {**doc, "version": 1}, path)
    with transaction() as session:
        store.save_draft_txn(session, doc["definitionId"], doc, acting_user())
    if publish_it:
        v, _ = publish_definition(doc["definitionId"])
    else:
        v = one(doc["definitionId"], VersionOptions("Latest"))
    return model(v), 201 if is_new else 200

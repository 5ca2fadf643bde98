"""Elsa's ``workflow-definitions/import-files``: JSON files and zips of them as multipart ``files``,
each a draft; bounded, all checked before any is saved (docs/design.md, "Bounded input")."""

from __future__ import annotations

import io
import zipfile
from typing import Any

from flask import request
from werkzeug.datastructures import FileStorage

from broker.console import audit
from broker.console.api.base import blueprint
from broker.console.api.definitions.routes import draft_document
from broker.console.api.openapi import (
    documented,
)
from broker.console.api.params import definition_limits
from broker.console.roles import current, require
from broker.errors import BadRequest, DefinitionRefused, PayloadTooLarge
from broker.ingress.context import services, transaction
from broker.ingress.schemas import is_json_media_type
from broker.runtime.admin import drafts as store
from broker.safety.bounded import decode_json
from broker.store.operator_actions import targets

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

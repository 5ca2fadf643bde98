"""Publishing a definition from Elsa Studio: a file in the first workflow folder, then a reload,
as an author committing a file would (docs/design.md, section 1)."""

from __future__ import annotations

import json
import logging
import os
import re
import tempfile
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from broker.errors import DefinitionRefused, WorkflowDefinitionError
from broker.registry.files import WorkflowFile, parse_workflow_document, scan_folder
from broker.registry.triggers import HTTP_ENDPOINT, index_triggers
from broker.registry.versions import PublishedWorkflow
from broker.registry.workflows import WorkflowRegistry

logger = logging.getLogger(__name__)

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
#: one publish at a time in a process: the reload after the write must see this write
_PUBLISH_LOCK = threading.Lock()


def file_name_for(definition_id: str) -> str:
    slug = _UNSAFE.sub("-", definition_id).strip("-.") or "workflow"
    return f"{slug[:120]}.json"


def target_path(registry: WorkflowRegistry, folder: Path, definition_id: str) -> Path:
    """Where the definition's file goes: its current file when that is in ``folder``, else a new
    file named after the definition id that no other definition uses."""
    current = registry.get_definition(definition_id, published=False)
    if current is not None and current.source_path:
        path = Path(current.source_path)
        if path.resolve().parent == folder.resolve() or folder.resolve() in path.resolve().parents:
            return path
    candidate = folder / file_name_for(definition_id)
    stem, n = candidate.stem, 2
    while candidate.exists():
        candidate = folder / f"{stem}-{n}.json"
        n += 1
    return candidate


def check(registry: WorkflowRegistry, document: dict[str, Any], path: Path) -> WorkflowFile:
    """The document as the registry would read it from ``path``, or ``DefinitionRefused``."""
    try:
        wf = parse_workflow_document(document, file=str(path))
    except WorkflowDefinitionError as exc:
        raise DefinitionRefused([f"{exc.path}: {exc.reason}"]) from exc
    if wf.request_type is not None:
        owner = registry.for_request_type(wf.request_type)
        if owner is not None and owner.definition_id != wf.definition_id:
            raise DefinitionRefused(
                [
                    f"Request type '{wf.request_type}' is already served by definition "
                    f"'{owner.definition_id}'"
                ]
            )
    clashes = _endpoint_clashes(registry, document)
    if clashes:
        raise DefinitionRefused(clashes)
    return wf


def _endpoints(document: Mapping[str, Any]) -> set[tuple[str, str]]:
    """The (path, method) pairs the document's HttpEndpoint triggers serve, as Elsa indexes them."""
    found = set()
    for spec in index_triggers(document):
        if spec.name == HTTP_ENDPOINT and spec.payload is not None:
            path = "/" + str(spec.payload.get("path", "")).strip("/")
            found.add((path, str(spec.payload.get("method", ""))))
    return found


def _endpoint_clashes(registry: WorkflowRegistry, document: Mapping[str, Any]) -> list[str]:
    """Elsa's publish validation: an HttpEndpoint path and method another published workflow
    already serves is refused (a call could not know which workflow to start)."""
    wanted = _endpoints(document)
    if not wanted:
        return []
    definition_id = document.get("definitionId")
    taken: set[tuple[str, str]] = set()
    for loaded in registry.definitions():
        if loaded.definition_id != definition_id:
            taken |= _endpoints(loaded.document)
    return [
        f"The {path} path and {method} method are already in use by another workflow!"
        for path, method in sorted(wanted & taken)
    ]


def _others_in(folder: Path, definition_id: str, path: Path) -> list[str]:
    """Other files of the folder that define the same definition id (they would clash)."""
    clashes = []
    for other in scan_folder(folder):
        if other.resolve() == path.resolve():
            continue
        try:
            text = other.read_text(encoding="utf-8-sig")
            if json.loads(text).get("definitionId") == definition_id:
                clashes.append(other.name)
        except (OSError, ValueError, AttributeError):
            continue
    return clashes


def write_atomically(path: Path, document: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(document, indent=2, ensure_ascii=False) + "\n"
    fd, tmp = tempfile.mkstemp(prefix=".publish-", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def publish_document(
    registry: WorkflowRegistry, folder: Path, document: dict[str, Any]
) -> PublishedWorkflow:
    """Write a validated document into ``folder`` and load it; answers the registered version."""
    definition_id = str(document.get("definitionId") or "")
    with _PUBLISH_LOCK:
        path = target_path(registry, folder, definition_id)
        wf = check(registry, document, path)
        clashes = _others_in(folder, definition_id, path)
        if clashes:
            raise DefinitionRefused(
                [f"definitionId '{definition_id}' is also defined by {', '.join(clashes)}"]
            )
        previous = path.read_bytes() if path.exists() else None
        write_atomically(path, document)
        registry.load()
        loaded = registry.get_definition(definition_id, published=False)
        if loaded is None or loaded.content_hash != wf.content_hash:
            reasons = [p.reason for p in registry.problems if Path(p.file) == path]
            _restore(path, previous)
            registry.load()
            raise DefinitionRefused(reasons or [f"the registry did not load {path.name}"])
    logger.info(
        "definition %s published from the console as version %d (%s) in %s",
        definition_id,
        loaded.version,
        loaded.version_id,
        path,
    )
    return loaded


def remove_file(registry: WorkflowRegistry, folder: Path, definition_id: str) -> bool:
    """Unload a definition by deleting its file from ``folder`` (retract, delete); False when its
    file is not there (a definition from another folder is left alone)."""
    with _PUBLISH_LOCK:
        current = registry.get_definition(definition_id, published=False)
        if current is None or not current.source_path:
            return False
        path = Path(current.source_path)
        if folder.resolve() not in path.resolve().parents:
            return False
        path.unlink(missing_ok=True)
        registry.load()
    logger.info("definition %s unpublished from the console: %s removed", definition_id, path)
    return True


def _restore(path: Path, previous: bytes | None) -> None:
    if previous is None:
        path.unlink(missing_ok=True)
    else:
        fd, tmp = tempfile.mkstemp(prefix=".restore-", suffix=".tmp", dir=path.parent)
        with os.fdopen(fd, "wb") as handle:
            handle.write(previous)
        os.replace(tmp, path)

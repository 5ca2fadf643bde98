"""Workflow files: finding them in the folders, reading one into a ``WorkflowFile`` and checking it
(the registry's structural checks, then the engine's parser)."""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import re
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from broker.engine.model import shapes
from broker.engine.model.definition import WorkflowDefinition
from broker.engine.validation import foreign_types, validate_document
from broker.errors import BadRequest, WorkflowDefinitionError
from broker.names import DEFAULT_QUEUE
from broker.registry.triggers import PLACEHOLDER_REASON, TriggerSpec, canonical_json, index_triggers
from broker.safety.bounded import WORKFLOW_LIMITS, decode_json

logger = logging.getLogger(__name__)

#: the width of the name columns a definition's names are stored in (definition id, name,
#: request type, queue, activity ids of triggers)
MAX_NAME = 200
#: the highest version number the store holds (a 32-bit column)
MAX_VERSION = 2_147_483_647
EXECUTORS = ("local", "elsa")
_QUEUE_NAME = re.compile(r"^[A-Za-z0-9_.:\-]{1,200}$")


@dataclasses.dataclass(frozen=True)
class Problem:
    """A workflow file (or folder) that could not be loaded, and why."""

    file: str
    reason: str


@dataclasses.dataclass(frozen=True)
class WorkflowFile:
    """One valid workflow file as read from disk."""

    source_path: str
    document: dict[str, Any] = dataclasses.field(hash=False)
    content_hash: str
    definition_id: str
    file_version_id: str | None  # the file's own ``id``
    file_version: int | None  # the file's own ``version``
    name: str | None
    request_type: str | None  # as spelled in the file
    queue: str
    executor: str  # "local" or "elsa"
    published: bool
    triggers: tuple[TriggerSpec, ...]
    #: the type name other files use for this one as an activity (when usable as an activity)
    activity_type_name: str | None = None
    #: (type, JSON path) of activities that must be other files' definitions
    foreign_types: tuple[tuple[str, str, str | None], ...] = ()


def content_hash(document: Mapping[str, Any]) -> str:
    """SHA-256 hex of the canonical JSON of a document: the identity of a version."""
    return hashlib.sha256(canonical_json(document).encode("utf-8")).hexdigest()


def default_queue(request_type: str | None) -> str:
    """``broker.<request type lower-cased>``, or ``broker.default`` without a request type."""
    return f"broker.{request_type.lower()}" if request_type else DEFAULT_QUEUE


def scan_folder(folder: Path) -> Iterator[Path]:
    """Every ``*.json`` file under ``folder``, recursively, in sorted order.

    Hidden files and folders (editor swap files, ``.git``) are skipped.
    """
    found = [
        path
        for path in folder.rglob("*")
        if path.suffix.lower() == ".json"
        and not any(part.startswith(".") for part in path.relative_to(folder).parts)
        and path.is_file()
    ]
    yield from sorted(found)


#: the largest workflow file the registry reads (Studio's exports are kilobytes; the console's
#: publish and import are bounded by BROKER_MAX_BODY_BYTES): a larger file is refused alone
WORKFLOW_FILE_MAX_BYTES = 16 * 1024 * 1024


def read_workflow_file(path: Path) -> WorkflowFile:
    """Read and validate one workflow file.

    Raises ``FileNotFoundError`` when it vanished meanwhile and ``WorkflowDefinitionError`` (naming
    the file, the JSON path and the reason) when it is malformed, nests too deep or is invalid.
    """
    file = str(path)
    size = path.stat().st_size
    if size > WORKFLOW_FILE_MAX_BYTES:
        raise WorkflowDefinitionError(
            f"the file holds {size} bytes, over the {WORKFLOW_FILE_MAX_BYTES} a workflow file "
            "may hold",
            file=file,
        )
    return parse_workflow_document(read_document(path.read_bytes(), file=file), file=file)


def read_document(raw: bytes, *, file: str) -> Any:
    """A workflow file's JSON, read by the broker's bounded reader (``WORKFLOW_LIMITS``: nesting
    refused before anything recurses, strict numbers, no lone surrogate or NUL)."""
    if not raw.removeprefix(b"\xef\xbb\xbf").strip():
        raise WorkflowDefinitionError("the file is empty", file=file)
    try:
        return decode_json(raw, WORKFLOW_LIMITS, field="file")
    except BadRequest as exc:
        path = str(exc.details.get("path") or "$")
        reason = exc.message.removesuffix(f" at {path}").replace("Malformed JSON", "malformed JSON")
        raise WorkflowDefinitionError(reason, file=file, path=path) from None


def parse_workflow_document(document: Any, *, file: str) -> WorkflowFile:
    """Validate a loaded document and extract what the registry needs."""
    if not isinstance(document, dict):
        raise WorkflowDefinitionError("a workflow file must hold a JSON object", file=file)
    shapes.check_nesting(document, file=file)
    # Kept in the shape Elsa writes: PascalCase names (older exports) are read as camelCase.
    document = shapes.workflow_document(document)
    definition_id = _text(document, "definitionId", file, required=True)
    assert definition_id is not None
    version_id = _text(document, "id", file)
    name = _text(document, "name", file)
    version = document.get("version")
    if version is not None and (isinstance(version, bool) or not isinstance(version, int)):
        raise WorkflowDefinitionError("must be an integer", file=file, path="$.version")
    if isinstance(version, int) and not 1 <= version <= MAX_VERSION:
        raise WorkflowDefinitionError(
            f"must be from 1 to {MAX_VERSION}", file=file, path="$.version"
        )
    published = document.get("isPublished", True)
    if not isinstance(published, bool):
        raise WorkflowDefinitionError("must be true or false", file=file, path="$.isPublished")
    props = document.get("customProperties") or {}
    if not isinstance(props, dict):
        raise WorkflowDefinitionError("must be an object", file=file, path="$.customProperties")
    request_type = _text(props, "requestType", file, prefix="$.customProperties")
    queue = _text(props, "queue", file, prefix="$.customProperties") or default_queue(request_type)
    if not _QUEUE_NAME.match(queue):
        raise WorkflowDefinitionError(
            f"queue name {queue!r} may only hold letters, digits and . _ : -",
            file=file,
            path="$.customProperties.queue",
        )
    executor = (_text(props, "executor", file, prefix="$.customProperties") or "local").lower()
    if executor not in EXECUTORS:
        raise WorkflowDefinitionError(
            f"executor must be one of {', '.join(EXECUTORS)}, not {executor!r}",
            file=file,
            path="$.customProperties.executor",
        )
    root = document.get("root")
    if not isinstance(root, dict) or not isinstance(root.get("type"), str):
        raise WorkflowDefinitionError(
            "must be an activity object with a type", file=file, path="$.root"
        )
    triggers = tuple(index_triggers(document))
    for trigger in triggers:
        if len(str(trigger.activity_id)) > MAX_NAME:
            raise WorkflowDefinitionError(
                f"an activity id is longer than {MAX_NAME} characters", file=file, path=trigger.path
            )
        if trigger.is_placeholder:
            raise WorkflowDefinitionError(
                f"{PLACEHOLDER_REASON} (activity {trigger.activity_id!r}, {trigger.activity_type})",
                file=file,
                path=trigger.path,
            )
    definition = _engine_validate(document, file)
    return WorkflowFile(
        source_path=file,
        document=document,
        content_hash=content_hash(document),
        definition_id=definition_id,
        file_version_id=version_id,
        file_version=version,
        name=name,
        request_type=request_type,
        queue=queue,
        executor=executor,
        published=published,
        triggers=triggers,
        activity_type_name=definition.activity_type_name if definition.usable_as_activity else None,
        foreign_types=tuple(foreign_types(definition)),
    )


def unresolved_activity(
    wf: WorkflowFile, files: Iterable[WorkflowFile]
) -> WorkflowDefinitionError | None:
    """The first activity of ``wf`` that is neither Elsa's nor a definition of ``files`` (by the
    ``workflowDefinitionId`` it names, else by the type name of a file usable as an activity)."""
    ids = {f.definition_id for f in files}
    names = {f.activity_type_name for f in files if f.activity_type_name}
    for type_name, path, definition_id in wf.foreign_types:
        if definition_id is not None and definition_id not in ids:
            return WorkflowDefinitionError(
                f"activity type {type_name!r} names workflow definition {definition_id!r}, "
                "which no loaded file defines",
                file=wf.source_path,
                path=path,
            )
        if definition_id is None and type_name not in names:
            return WorkflowDefinitionError(
                f"unknown activity type {type_name!r} (not an Elsa activity, and no loaded "
                "workflow usable as an activity has that name)",
                file=wf.source_path,
                path=path,
            )
    return None


def _text(
    mapping: Mapping[str, Any], key: str, file: str, *, required: bool = False, prefix: str = "$"
) -> str | None:
    value = mapping.get(key)
    if value is None:
        if required:
            raise WorkflowDefinitionError("is required", file=file, path=f"{prefix}.{key}")
        return None
    if not isinstance(value, str) or not value.strip():
        raise WorkflowDefinitionError(
            "must be a non-empty string", file=file, path=f"{prefix}.{key}"
        )
    if len(value.strip()) > MAX_NAME:
        raise WorkflowDefinitionError(
            f"is longer than {MAX_NAME} characters", file=file, path=f"{prefix}.{key}"
        )
    return value.strip()


def _engine_validate(document: dict[str, Any], file: str) -> WorkflowDefinition:
    """Run the engine's parser and checks: activity types, expression languages, connections
    and their ports, workflow options (``broker.engine.validation``)."""
    try:
        return validate_document(document, file=file)
    except WorkflowDefinitionError:
        raise
    except Exception as exc:
        # A parser bug must not take the whole registry down; the file is refused and reported.
        logger.exception("workflow parser failed on %s", file)
        raise WorkflowDefinitionError(f"the workflow parser failed: {exc!r}", file=file) from exc

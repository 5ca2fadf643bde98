"""The engine's view of the workflow registry: parsed definitions by version, id or type name."""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

from broker.engine.model.definition import WorkflowDefinition
from broker.engine.parser import parse_workflow
from broker.errors import WorkflowDefinitionError

if TYPE_CHECKING:
    from broker.registry import WorkflowRegistry
    from broker.registry.versions import PublishedWorkflow


logger = logging.getLogger(__name__)


class RegistryLookup:
    """Implements the engine's ``DefinitionLookup`` over a ``WorkflowRegistry``."""

    def __init__(self, registry: WorkflowRegistry) -> None:
        self.registry = registry
        self._parsed: dict[str, WorkflowDefinition] = {}
        self._lock = threading.Lock()

    def parse(self, published: PublishedWorkflow) -> WorkflowDefinition:
        """The parsed definition of a ``PublishedWorkflow`` (cached by version id)."""
        with self._lock:
            found = self._parsed.get(published.version_id)
        if found is not None:
            return found
        document = {
            **published.document,
            "id": published.version_id,
            "definitionId": published.definition_id,
            "version": published.version,
        }
        try:
            definition = parse_workflow(document, file=published.source_path)
        except WorkflowDefinitionError:
            raise
        except Exception as exc:
            # A parser bug must not fail every delivery of this work: it cannot be loaded.
            logger.exception("workflow version %s could not be parsed", published.version_id)
            raise WorkflowDefinitionError(
                f"the workflow parser failed: {type(exc).__name__}", file=published.source_path
            ) from exc
        with self._lock:
            self._parsed[published.version_id] = definition
        return definition

    def by_version_id(self, version_id: str) -> WorkflowDefinition | None:
        published = self.registry.get_version(version_id)
        return self.parse(published) if published is not None else None

    def by_definition_id(self, definition_id: str) -> WorkflowDefinition | None:
        published = self.registry.get_definition(definition_id)
        return self.parse(published) if published is not None else None

    def by_activity_type(self, type_name: str) -> WorkflowDefinition | None:
        for published in self.registry.definitions():
            try:
                definition = self.parse(published)
            except WorkflowDefinitionError:
                continue  # refused by the registry's own checks too: no candidate
            if definition.usable_as_activity and definition.activity_type_name == type_name:
                return definition
        return None

    def queue_of(self, definition_id: str) -> str | None:
        published = self.registry.get_definition(definition_id)
        return str(published.queue) if published is not None else None

"""How the engine finds the definitions a workflow refers to (children, composites)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Protocol

from broker.engine.model.definition import WorkflowDefinition


class DefinitionLookup(Protocol):
    def by_version_id(self, version_id: str) -> WorkflowDefinition | None:
        """The exact version, or None."""

    def by_definition_id(self, definition_id: str) -> WorkflowDefinition | None:
        """The published version of a definition, else its latest, else None."""

    def by_activity_type(self, type_name: str) -> WorkflowDefinition | None:
        """The definition usable as an activity under this type name (PascalCase of its name)."""


class DefinitionIndex:
    """An in-memory lookup; later additions of the same version id replace earlier ones."""

    def __init__(self, definitions: Iterable[WorkflowDefinition] = ()) -> None:
        self._versions: dict[str, WorkflowDefinition] = {}
        self._by_definition: dict[str, list[WorkflowDefinition]] = {}
        for definition in definitions:
            self.add(definition)

    def add(self, definition: WorkflowDefinition) -> None:
        previous = self._versions.get(definition.id)
        if previous is not None:
            self._by_definition[previous.definition_id].remove(previous)
        self._versions[definition.id] = definition
        self._by_definition.setdefault(definition.definition_id, []).append(definition)

    def __iter__(self) -> Iterator[WorkflowDefinition]:
        return iter(list(self._versions.values()))

    def by_version_id(self, version_id: str) -> WorkflowDefinition | None:
        return self._versions.get(version_id)

    def by_definition_id(self, definition_id: str) -> WorkflowDefinition | None:
        versions = self._by_definition.get(definition_id) or []
        published = [d for d in versions if d.is_published]
        if published:
            return max(published, key=lambda d: d.version)
        latest = [d for d in versions if d.is_latest] or versions
        return max(latest, key=lambda d: d.version) if latest else None

    def by_activity_type(self, type_name: str) -> WorkflowDefinition | None:
        candidates = [
            d
            for d in self._versions.values()
            if d.usable_as_activity and d.activity_type_name == type_name
        ]
        if not candidates:
            return None
        return self.by_definition_id(candidates[-1].definition_id)

"""The workflow model: definitions, their JSON shapes, enums and options, activity specs, and the
value conversions they share (pure data, no behaviour)."""

from broker.engine.model.definition import Activity, WorkflowDefinition
from broker.engine.model.lookup import DefinitionLookup
from broker.engine.model.specs import ActivitySpec, Declaration, InputSpec, OutputSpec

__all__ = [
    "Activity",
    "ActivitySpec",
    "Declaration",
    "DefinitionLookup",
    "InputSpec",
    "OutputSpec",
    "WorkflowDefinition",
]

"""Workflow definitions from the configured folders: files, versions, triggers, watching."""

from broker.registry.files import Problem, WorkflowFile
from broker.registry.triggers import TriggerSpec, trigger_hash
from broker.registry.versions import PublishedWorkflow
from broker.registry.workflows import WorkflowRegistry

__all__ = [
    "Problem",
    "PublishedWorkflow",
    "TriggerSpec",
    "WorkflowFile",
    "WorkflowRegistry",
    "trigger_hash",
]

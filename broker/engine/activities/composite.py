"""Workflow-definition activities: another definition run inside this instance, as an activity
(Elsa's ``WorkflowDefinitionActivity``)."""

from __future__ import annotations

from typing import Any

from broker.engine.activities.base import DONE, CompletedChild
from broker.engine.activities.control import WorkflowScope
from broker.engine.model.definition import Input, WorkflowDefinition, camel_case
from broker.engine.run.activity_context import ActivityContext
from broker.engine.run.state import new_scope
from broker.errors import WorkflowFault

MAX_COMPOSITE_DEPTH = 32


class Composite(WorkflowScope):
    """A workflow-definition activity: the other definition runs inside this instance, its
    declared inputs from this node's inputs, its outputs back to this node's bindings."""

    def execute(self, ax: ActivityContext) -> None:
        definition = resolve_composite(ax)
        depth = sum(1 for _ in composite_ancestors(ax))
        if depth >= MAX_COMPOSITE_DEPTH:
            raise WorkflowFault(
                f"workflow-definition activities nest deeper than {MAX_COMPOSITE_DEPTH} (a cycle?)",
                activity_id=ax.node.id,
            )
        inputs: dict[str, Any] = {}
        for port in definition.inputs:
            spec = ax.node.inputs.get(camel_case(port.name)) or ax.node.inputs.get(port.name)
            if spec is not None and spec.expression is not None:
                inputs[port.name] = ax.run.evaluate(
                    ax.ctx,
                    ax.node,
                    Input(port.type_name or spec.type_name, spec.expression),
                )
        scope = new_scope(
            definition.variables,
            kind="workflow",
            inputs=inputs,
            outputs=[port.name for port in definition.outputs],
        )
        scope["definitionVersionId"] = definition.id
        ax.ctx["scope"] = scope
        ax.run.remember(definition)
        for variable in definition.variables:
            if variable.value is not None:
                scope["vars"][variable.name] = ax.run.evaluate(
                    ax.ctx,
                    ax.node,
                    Input(variable.type_name, {"type": "Literal", "value": variable.value}),
                )
        ax.schedule(definition.root, def_id=definition.id)

    def on_child_completed(self, ax: ActivityContext, child: CompletedChild) -> None:
        self.finish(ax, None)

    def finish(self, ax: ActivityContext, outcomes: tuple[str, ...] | None) -> None:
        scope = ax.ctx["scope"]
        chosen = outcomes or tuple(scope.get("outcomes") or ()) or DONE
        definition = ax.run.definition(scope["definitionVersionId"])
        for port in definition.outputs:
            if port.name not in scope["outputs"]:
                continue
            binding = camel_case(port.name)
            if binding not in ax.node.outputs and port.name in ax.node.outputs:
                binding = port.name
            ax.set_output(binding, scope["outputs"][port.name])
        ax.complete(*chosen)


def composite_ancestors(ax: ActivityContext) -> list[str]:
    found = []
    parent = ax.ctx["parent"]
    while parent:
        ctx = ax.run.contexts[parent]
        if ctx.get("scope", {}).get("kind") == "workflow" and ctx["parent"]:
            found.append(parent)
        parent = ctx["parent"]
    return found


def resolve_composite(ax: ActivityContext) -> WorkflowDefinition:
    """By version id; else the published (else latest) version; else by activity type."""
    lookup = ax.definitions
    version_id = ax.node.properties.get("workflowDefinitionVersionId")
    definition_id = ax.node.properties.get("workflowDefinitionId")
    found = lookup.by_version_id(version_id) if isinstance(version_id, str) else None
    if found is None and isinstance(definition_id, str):
        found = lookup.by_definition_id(definition_id)
    if found is None:
        found = lookup.by_activity_type(ax.node.type)
    if found is None:
        raise WorkflowFault(
            f"no workflow definition provides activity type {ax.node.type!r}",
            activity_id=ax.node.id,
        )
    return found

"""The activity catalog, built from each implementation's ``@activity`` declaration: type names
(and aliases) to behaviours, the alias table, and the outbound ports a connection may use."""

from __future__ import annotations

from collections.abc import Mapping

from broker.engine.activities import (
    composite,
    control,
    data,
    dispatch,
    email,
    flow,
    statemachine,
    waits,
)
from broker.engine.activities.base import DECLARED, Behaviour
from broker.engine.activities.http import endpoint, files, outbound, webhooks
from broker.engine.model.definition import Activity
from broker.engine.model.lookup import DefinitionLookup
from broker.engine.model.specs import Declaration
from broker.engine.run.activity_context import ActivityContext
from broker.errors import WorkflowFault

__all__ = [
    "CATALOG",
    "COMPOSITE",
    "FIXED_PORTS",
    "TRIGGER_NAMES",
    "TYPE_ALIASES",
    "UNKNOWN",
    "behaviour_for",
    "declaration_for",
    "is_known_type",
    "register",
]

#: The activity families, in the order the catalog (and Studio's activity list) shows them.
FAMILIES = (
    control,
    flow,
    statemachine,
    data,
    waits,
    dispatch,
    endpoint,
    outbound,
    files,
    webhooks,
    email,
)


def _declared() -> list[tuple[type[Behaviour], Declaration]]:
    by_module = {family.__name__: index for index, family in enumerate(FAMILIES)}
    found = [(cls, found) for cls, found in DECLARED.items() if cls.__module__ in by_module]
    return sorted(found, key=lambda item: by_module[item[0].__module__])  # stable: class order


_DECLARED = _declared()

CATALOG: dict[str, Behaviour] = {found.type_name: cls() for cls, found in _DECLARED}

#: Older or shorter type names mapped onto the catalog's names (the parser reads them so).
TYPE_ALIASES: Mapping[str, str] = {
    alias: found.type_name for _cls, found in _DECLARED for alias in found.aliases
}
for _alias, _name in TYPE_ALIASES.items():
    CATALOG.setdefault(_alias, CATALOG[_name])

#: The ports a flowchart connection may leave an activity by, where they are fixed. Types not listed
#: have ports that depend on the file (FlowSwitch cases, FlowFork branches, SendHttpRequest status
#: codes, a workflow-definition activity's outcomes, a script's ``setOutcome``): not checked.
FIXED_PORTS: dict[str, frozenset[str]] = {
    found.type_name: found.outbound for _cls, found in _DECLARED if found.outbound is not None
}

#: Types registered after the built-ins (a team's Python activities), and their required inputs.
BUILT_IN: frozenset[str] = frozenset(CATALOG)
REQUIRED_INPUTS: dict[str, tuple[str, ...]] = {}


def register(declaration: Declaration, behaviour: Behaviour, *, required: tuple[str, ...]) -> None:
    """Add a type declared outside the engine (a Python activity) to the catalog; the caller has
    checked that it shadows no built-in type."""
    DECLARED[type(behaviour)] = declaration
    CATALOG[declaration.type_name] = behaviour
    if declaration.outbound is not None:
        FIXED_PORTS[declaration.type_name] = declaration.outbound
    REQUIRED_INPUTS[declaration.type_name] = required


#: Every spelling of a trigger activity's type mapped to the one name its trigger is stored under
#: (``@activity(..., trigger=...)``), so a stimulus matches whatever spelling the file used.
TRIGGER_NAMES: Mapping[str, str] = {
    spelling: found.trigger
    for _cls, found in _DECLARED
    if found.trigger is not None
    for spelling in found.trigger_spellings
}

COMPOSITE = composite.Composite()


class Unknown(Behaviour):
    def execute(self, ax: ActivityContext) -> None:
        raise WorkflowFault(f"unknown activity type {ax.node.type!r}", activity_id=ax.node.id)


UNKNOWN = Unknown()


def declaration_for(behaviour: Behaviour) -> Declaration | None:
    """The declaration of an implementation's own class (a subclass never borrows its base's)."""
    return DECLARED.get(type(behaviour))


def behaviour_for(node: Activity, definitions: DefinitionLookup) -> Behaviour:
    found = CATALOG.get(node.type)
    if found is not None:
        return found
    if "workflowDefinitionId" in node.properties or definitions.by_activity_type(node.type):
        return COMPOSITE
    return UNKNOWN


def is_known_type(type_name: str, definitions: DefinitionLookup) -> bool:
    return type_name in CATALOG or definitions.by_activity_type(type_name) is not None

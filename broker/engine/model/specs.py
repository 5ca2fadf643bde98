"""The shape of an activity's description, as Studio needs it (``ActivitySpec``), the
declaration that joins it to a type name (``Declaration``), and Elsa's default UI hints."""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

Kind = Literal["Action", "Trigger", "Task"]


@dataclasses.dataclass(frozen=True)
class InputSpec:
    name: str
    type_name: str = "String"
    description: str = ""
    ui_hint: str | None = None  # derived from the type when not given (as Elsa does)
    default: Any = None
    wrapped: bool = True  # an expression (Input<T>) rather than a plain value
    options: tuple[str, ...] = ()  # the items of a dropdown
    syntax: str | None = None  # the default expression language
    browsable: bool = True


@dataclasses.dataclass(frozen=True)
class OutputSpec:
    name: str
    type_name: str = "Object"
    description: str = ""


@dataclasses.dataclass(frozen=True)
class ActivitySpec:
    category: str
    description: str
    inputs: tuple[InputSpec, ...] = ()
    outputs: tuple[OutputSpec, ...] = ()
    outcomes: tuple[str, ...] = ()  # flow ports; none means the designer's single "Done"
    ports: tuple[str, ...] = ()  # embedded ports (child activities held in a property)
    kind: Kind = "Action"
    container: bool = False
    browsable: bool = True
    start: bool = False
    terminal: bool = False
    display_name: str | None = None


#: The ``Result`` output most activities that produce a value declare.
RESULT = OutputSpec("Result", "Object", "The activity's result.")


@dataclasses.dataclass(frozen=True)
class Declaration:
    """Everything known about one activity type besides its behaviour: its type name, the older
    names it answers to, its description for the designer, and (when checked) the ports a
    flowchart connection may leave it by."""

    type_name: str
    spec: ActivitySpec
    aliases: tuple[str, ...] = ()
    outbound: frozenset[str] | None = None
    #: the trigger name it starts workflows under (``trigger_names``), None: not a trigger
    trigger: str | None = None
    #: spellings the trigger index also accepts besides the type name and the aliases
    trigger_aliases: tuple[str, ...] = ()

    @property
    def trigger_spellings(self) -> tuple[str, ...]:
        if self.trigger is None:
            return ()
        return (self.type_name, *self.aliases, *self.trigger_aliases)


def ui_hint_for(spec: InputSpec) -> str:
    """Elsa's default UI hint for an input of this type (``ActivityDescriber.GetUIHint``)."""
    if spec.ui_hint is not None:
        return spec.ui_hint
    if spec.options:
        return "dropdown"
    lowered = spec.type_name.lower()
    if lowered == "boolean":
        return "checkbox"
    if lowered.endswith("[]") or lowered.startswith(("list", "ienumerable")):
        return "dropdown"
    return "singleline"

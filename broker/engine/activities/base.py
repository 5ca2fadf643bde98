"""The shape every activity implementation has, and ``@activity``, which declares one: its type
name, aliases, description and outbound ports, all beside its behaviour."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from broker.engine.model.specs import ActivitySpec, Declaration
from broker.engine.run.activity_context import Behaviour
from broker.engine.run.outcomes import DONE, CompletedChild

__all__ = ["DECLARED", "DONE", "Behaviour", "CompletedChild", "activity"]

B = TypeVar("B", bound=type[Behaviour])

#: Every declared implementation class, in the order the declarations ran.
DECLARED: dict[type[Behaviour], Declaration] = {}


def activity(
    type_name: str,
    spec: ActivitySpec,
    *,
    aliases: tuple[str, ...] = (),
    outbound: tuple[str, ...] | None = None,
    trigger: str | None = None,
    trigger_aliases: tuple[str, ...] = (),
) -> Callable[[B], B]:
    """Declare the decorated class as the implementation of ``type_name``. ``outbound`` names
    the ports a flowchart connection may leave it by (unchecked when ``None``); ``trigger`` the
    name its trigger is indexed under, ``trigger_aliases`` more spellings the index accepts."""

    def declare(cls: B) -> B:
        if cls in DECLARED:
            raise TypeError(f"{cls.__qualname__} is declared twice")
        outbound_ports = frozenset(outbound) if outbound is not None else None
        DECLARED[cls] = Declaration(
            type_name, spec, aliases, outbound_ports, trigger, trigger_aliases
        )
        return cls

    return declare

"""Elsa's enums that workflow JSON holds, in their declared order (a number is the index), and
the activity inputs that hold them; the reader and the activities share these tables."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: ``Elsa.Workflows.ForkJoinMode``
FORK_JOIN_MODES = ("WaitAll", "WaitAny")
#: ``Elsa.Workflows.Activities.Flowchart.Models.FlowJoinMode``
FLOW_JOIN_MODES = ("WaitAll", "WaitAllActive", "WaitAny")
#: ``Elsa.Workflows.Activities.SwitchMode``
SWITCH_MODES = ("MatchFirst", "MatchAny")

#: (activity type, camelCase input) -> the enum's members
ENUM_INPUTS: Mapping[tuple[str, str], tuple[str, ...]] = {
    ("Elsa.Fork", "joinMode"): FORK_JOIN_MODES,
    ("Elsa.FlowJoin", "mode"): FLOW_JOIN_MODES,
    ("Elsa.Switch", "mode"): SWITCH_MODES,
    ("Elsa.FlowSwitch", "mode"): SWITCH_MODES,
}


def enum_member(value: Any, members: tuple[str, ...]) -> str | None:
    """``"WaitAny"`` (any case), ``1`` or ``"1"`` -> the member's name; None when it is none of
    them (as .NET's enum converter accepts names case-insensitively and numbers as indexes)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int) or (isinstance(value, str) and value.strip().isdecimal()):
        index = int(value)
        return members[index] if 0 <= index < len(members) else None
    if isinstance(value, str):
        wanted = value.strip().lower()
        return next((m for m in members if m.lower() == wanted), None)
    return None


def enum_value(value: Any, members: tuple[str, ...], default: str) -> str:
    """The member an evaluated input names, ``default`` when unset or unknown."""
    if value is None or value == "":
        return default
    return enum_member(value, members) or default

"""Which activity inputs and outputs the execution journal keeps: Elsa's log persistence modes,
read from ``customProperties`` of the workflow and its activities."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Literal

Mode = Literal["Include", "Exclude", "Inherit"]
Kind = Literal["inputs", "outputs"]

LEGACY_KEY = "logPersistenceMode"
CONFIG_KEY = "logPersistenceConfig"
KEYS = (LEGACY_KEY, CONFIG_KEY)
_NUMBERED: dict[int, Mode] = {0: "Inherit", 1: "Include", 2: "Exclude"}
STRATEGIES: dict[str, Mode] = {
    "include": "Include",
    "exclude": "Exclude",
    "inherit": "Inherit",
    "configuration": "Inherit",  # the server's configured mode: the broker's default
}


def mode_of(value: Any) -> Mode | None:
    """The mode one entry names (legacy or current spelling); None for no entry."""
    if value is None:
        return None
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return _NUMBERED.get(value)
    if isinstance(value, str):
        return STRATEGIES.get(value.strip().lower())
    if isinstance(value, Mapping):
        evaluation = str(value.get("evaluationMode") or "Strategy")
        if evaluation.lower() != "strategy":
            return "Exclude"  # an expression the engine cannot evaluate here
        strategy = value.get("strategyType")
        if not isinstance(strategy, str) or not strategy.strip():
            return "Inherit"
        class_name = strategy.split(",")[0].strip().rsplit(".", 1)[-1]
        return STRATEGIES.get(class_name.lower(), "Inherit")
    return None


def _section(properties: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    found = properties.get(key)
    return found if isinstance(found, Mapping) else {}


def _default(properties: Mapping[str, Any]) -> Mode | None:
    """The default a ``customProperties`` sets (the current spelling wins over the legacy)."""
    current = mode_of(_section(properties, CONFIG_KEY).get("default"))
    if current is not None and current != "Inherit":
        return current
    legacy = mode_of(_section(properties, LEGACY_KEY).get("default"))
    return legacy if legacy != "Inherit" else None


@dataclasses.dataclass(frozen=True)
class Policy:
    """The log persistence of one activity in one workflow."""

    default: Mode
    overrides: Mapping[tuple[Kind, str], Mode]

    #: the common case, decided once: nothing is excluded
    keeps_all: bool = dataclasses.field(init=False, default=False)

    def __post_init__(self) -> None:
        everything = self.default != "Exclude" and "Exclude" not in self.overrides.values()
        object.__setattr__(self, "keeps_all", everything)

    def keeps(self, kind: Kind, name: str) -> bool:
        mode = self.overrides.get((kind, name[:1].lower() + name[1:]), "Inherit")
        if mode == "Inherit":
            mode = self.default
        return mode != "Exclude"


def policy_for(
    workflow_properties: Mapping[str, Any], activity_properties: Mapping[str, Any]
) -> Policy:
    """The policy of an activity from the workflow's and the activity's ``customProperties``."""
    if not any(k in p for p in (workflow_properties, activity_properties) for k in KEYS):
        return INCLUDE_ALL  # the common case, on every evaluated input: no lookups
    default: Mode = _default(activity_properties) or _default(workflow_properties) or "Include"
    overrides: dict[tuple[Kind, str], Mode] = {}
    kinds: tuple[Kind, ...] = ("inputs", "outputs")
    # Legacy first, so an entry in the current spelling replaces it.
    for key in (LEGACY_KEY, CONFIG_KEY):
        section = _section(activity_properties, key)
        for kind in kinds:
            entries = section.get(kind)
            if not isinstance(entries, Mapping):
                continue
            for name, value in entries.items():
                mode = mode_of(value)
                if mode is not None and mode != "Inherit":
                    overrides[(kind, str(name))] = mode
    return Policy(default, overrides)


INCLUDE_ALL = Policy("Include", {})

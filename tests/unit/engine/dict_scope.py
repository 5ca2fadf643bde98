"""``DictScope``: the smallest ``broker.engine.expr.scope.Scope``, for expression tests."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterable, Mapping
from typing import Any

FIXED_NOW = dt.datetime(2026, 3, 14, 15, 9, 26, 535000, tzinfo=dt.UTC)


@dataclasses.dataclass
class DictScope:
    """Dictionaries for variables, inputs and activity outputs; records every write."""

    variables: dict[str, Any] = dataclasses.field(default_factory=dict)
    inputs: dict[str, Any] = dataclasses.field(default_factory=dict)
    outputs: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    #: activity id -> name, for outputs named by an activity's id
    activity_ids: dict[str, str] = dataclasses.field(default_factory=dict)
    last: Any = None
    activity_id: str | None = "activity-1"
    workflow_instance_id: str = "instance-1"
    correlation_id: str | None = "request-1"
    info: dict[str, Any] = dataclasses.field(
        default_factory=lambda: {
            "definitionId": "orders",
            "definitionVersionId": "orders-v3",
            "version": 3,
            "name": "Orders",
        }
    )
    clock: dt.datetime = FIXED_NOW
    writes: list[tuple[str, Any]] = dataclasses.field(default_factory=list)

    def variable_names(self) -> Iterable[str]:
        return list(self.variables)

    def get_variable(self, name: str) -> Any:
        return self.variables[name]

    def set_variable(self, name: str, value: Any) -> None:
        self.writes.append((name, value))
        self.variables[name] = value

    def input_names(self) -> Iterable[str]:
        return list(self.inputs)

    def get_input(self, name: str) -> Any:
        return self.inputs[name]

    def activity_names(self) -> Iterable[str]:
        return list(self.outputs)

    def activity_outputs(self, activity: str) -> Mapping[str, Any]:
        return self.outputs[self.activity_ids.get(activity, activity)]

    def last_result(self) -> Any:
        return self.last

    def workflow_info(self) -> Mapping[str, Any]:
        return self.info

    def set_workflow_info(self, key: str, value: str | None) -> None:
        if key == "correlationId":
            self.correlation_id = value
        elif key == "name":
            self.info["name"] = value
        else:
            raise KeyError(key)
        self.writes.append((key, value))

    def now(self) -> dt.datetime:
        return self.clock

"""What an expression sees while an activity runs: the interpreter implements ``Scope`` and
expressions read and write only through it, so each is testable alone."""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping
from typing import Any, Protocol


class Scope(Protocol):
    """The names an expression can reach: variables, workflow input, activity outputs, ids."""

    @property
    def activity_id(self) -> str | None:
        """The id of the activity whose input is being evaluated (for error messages)."""

    @property
    def workflow_instance_id(self) -> str:
        """The running instance's id (``getWorkflowInstanceId()``)."""

    @property
    def correlation_id(self) -> str | None:
        """The instance's correlation id (``getCorrelationId()``)."""

    def variable_names(self) -> Iterable[str]:
        """Names of the variables in scope, innermost first."""

    def get_variable(self, name: str) -> Any:
        """The variable's value; raises ``KeyError`` when no such variable is in scope."""

    def set_variable(self, name: str, value: Any) -> None:
        """Set a variable (declared in scope, else created on the workflow)."""

    def input_names(self) -> Iterable[str]:
        """Names of the workflow's inputs (and a composite's declared inputs)."""

    def get_input(self, name: str) -> Any:
        """The workflow input's value; raises ``KeyError`` when absent."""

    def activity_names(self) -> Iterable[str]:
        """Names (else ids) of the activities whose outputs can be read
        (``get<Output>From<Name>()``)."""

    def activity_outputs(self, activity: str) -> Mapping[str, Any]:
        """An activity's outputs by output name, the activity named by its name or id;
        ``KeyError`` when it has none."""

    def last_result(self) -> Any:
        """The ``result`` output of the activity that ran last in this step (``getLastResult()``),
        else None."""

    def workflow_info(self) -> Mapping[str, Any]:
        """The instance's ``definitionId``, ``definitionVersionId``, ``version`` and ``name``."""

    def set_workflow_info(self, key: str, value: str | None) -> None:
        """Change the instance's ``correlationId`` or ``name`` (as Correlate and SetName do);
        ``KeyError`` for any other key."""

    def now(self) -> datetime.datetime:
        """The engine's clock (``DateTime.Now``): a redone step sees the same time."""

"""What an expression sees while an activity runs.

The interpreter implements ``Scope``; ``broker.engine.expressions`` only reads and writes through
it, so the two stay independent and each is testable alone.
"""

from __future__ import annotations

from collections.abc import Iterable
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
        """Names of activities whose outputs can be read (``getOutputFrom<Name>()``)."""

    def get_activity_output(self, activity_name: str, output_name: str | None = None) -> Any:
        """An activity's output (its ``result`` when ``output_name`` is None); ``KeyError``."""

    def current_value(self) -> Any:
        """The current item of the innermost loop (``getCurrentValue()``), else None."""

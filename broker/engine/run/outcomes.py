"""The values the interpreter and the activities share: the default outcome, what a container
learns when a child completes, and the type name of the synthetic workflow node."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from broker.engine.model.definition import Activity

DONE = ("Done",)

WORKFLOW_TYPE = "Elsa.Workflow"  # the synthetic node at the top of every workflow scope


@dataclasses.dataclass(frozen=True)
class CompletedChild:
    """What a container learns when one of its children completes."""

    context_id: str
    node: Activity
    outcomes: tuple[str, ...]
    props: Mapping[str, Any]
    faulted: bool = False

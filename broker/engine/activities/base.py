"""The shape every activity implementation has: execute, child completed, resume."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from broker.engine.activity_context import ActivityContext
    from broker.engine.definition import Activity


@dataclasses.dataclass(frozen=True)
class CompletedChild:
    """What a container learns when one of its children completes."""

    context_id: str
    node: Activity
    outcomes: tuple[str, ...]
    props: Mapping[str, Any]
    faulted: bool = False


class Behaviour:
    """How one activity type runs. Stateless: what must survive a suspension lives in
    ``ax.props`` (the activity instance's JSON properties), so one instance serves all runs."""

    #: Names of the bookmarks this activity creates, for documentation and trigger indexing.
    blocking = False

    def execute(self, ax: ActivityContext) -> None:
        ax.complete()

    def on_child_completed(self, ax: ActivityContext, child: CompletedChild) -> None:
        if not ax.has_children():
            ax.complete()

    def resume(self, ax: ActivityContext, bookmark: Mapping[str, Any], value: Any) -> None:
        ax.complete()


DONE = ("Done",)

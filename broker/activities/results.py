"""What a Python activity hands back: its outputs and outcome (``Result``) or a wait for an
external completion (``Wait``); and the JSON answer a task-mode activity resumes a workflow with."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

__all__ = ["Answer", "Result", "Wait", "answer_of"]


@dataclasses.dataclass(frozen=True)
class Result:
    """The activity's outputs (by name) and the outcome its flowchart connection leaves by."""

    outputs: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    outcome: str = "Done"


@dataclasses.dataclass(frozen=True)
class Wait:
    """Suspend the workflow until the event ``event`` arrives (``POST /events/{event}``, with the
    request's correlation id); its payload becomes the ``result`` output, ``outcome`` the port."""

    event: str
    outputs: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    outcome: str = "Done"


#: the JSON a task-mode activity resumes its workflow with: ``{"outputs", "outcome"}``,
#: ``{"wait": {...}}`` or ``{"fault": message}``
Answer = dict[str, Any]


def answer_of(returned: Any, outputs: tuple[str, ...]) -> Answer:
    """What the function returned, as an answer: a ``Result``, a ``Wait``, a mapping of its
    declared outputs, or (one value) its first declared output."""
    if isinstance(returned, Result):
        return {"outputs": dict(returned.outputs), "outcome": returned.outcome}
    if isinstance(returned, Wait):
        return {
            "wait": {
                "event": returned.event,
                "outputs": dict(returned.outputs),
                "outcome": returned.outcome,
            }
        }
    if isinstance(returned, Mapping) and outputs and set(returned) <= set(outputs):
        return {"outputs": dict(returned), "outcome": "Done"}
    if returned is None:
        return {"outputs": {}, "outcome": "Done"}
    name = outputs[0] if outputs else "result"
    return {"outputs": {name: returned}, "outcome": "Done"}

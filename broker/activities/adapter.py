"""``@activity``: a declared Python activity joins the engine's catalog, as a behaviour the
interpreter runs and a spec Studio's descriptors are built from (docs/activities.md)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, TypeVar

from broker.activities.declaring import (
    EDITORS,
    ActivityDeclaration,
    Input,
    Mode,
    Retry,
    declare,
)
from broker.activities.results import Answer, answer_of
from broker.engine.activities.base import Behaviour
from broker.engine.activities.catalog import BUILT_IN, register
from broker.engine.model.definition import camel_case, pascal_case
from broker.engine.model.specs import ActivitySpec, Declaration, InputSpec, OutputSpec
from broker.engine.run.activity_context import ActivityContext
from broker.engine.run.results import RunActivity
from broker.errors import ActivityDeclarationError, RetryLater, WorkflowFault
from broker.names import EVENT

__all__ = ["DECLARED", "TASK_BOOKMARK", "PythonActivity", "activity", "call", "fit", "install"]

T = TypeVar("T")

#: the bookmark a task-mode activity waits on until its Celery task answers
TASK_BOOKMARK = "Broker.RunActivity"

#: Every Python activity declared in this process, by type name, in declaration order.
DECLARED: dict[str, ActivityDeclaration] = {}


def activity(
    type_name: str,
    *,
    category: str,
    display_name: str | None = None,
    description: str = "",
    inputs: Mapping[str, Input] | None = None,
    outputs: tuple[str, ...] = ("result",),
    outcomes: tuple[str, ...] = ("Done",),
    retry: Retry | None = None,
    queue: str | None = None,
    run: Mode | None = None,
    time_limit: float | None = None,
) -> Callable[[T], T]:
    """Declare the decorated function, or class with a ``run`` method, as the activity
    ``type_name``: its parameters are the inputs (annotation: type; no default: required); a
    ``queue`` makes it run as its own Celery task unless ``run="inline"`` says otherwise, each
    call for at most ``time_limit`` seconds (``BROKER_ACTIVITY_TIME_LIMIT`` unless given). A bad
    declaration raises ``ActivityDeclarationError`` naming the activity."""

    def decorate(target: T) -> T:
        install(
            declare(
                type_name,
                target,
                category=category,
                display_name=display_name,
                description=description,
                inputs=inputs,
                outputs=outputs,
                outcomes=outcomes,
                retry=retry,
                queue=queue,
                run=run,
                time_limit=time_limit,
            )
        )
        return target

    return decorate


def install(declared: ActivityDeclaration) -> None:
    """Add ``declared`` to the engine's catalog (Studio's descriptors and the publish checks read
    it there); refuses a built-in's type name and a second declaration of one type."""
    name = declared.type_name
    if name in BUILT_IN or name.lower().startswith("elsa."):
        raise ActivityDeclarationError(
            f"activity {name!r} shadows a built-in Elsa activity (choose your own namespace)",
            activity=name,
        )
    earlier = DECLARED.get(name)
    if earlier is not None and _origin(earlier) != _origin(declared):
        raise ActivityDeclarationError(
            f"activity {name!r} is declared twice ({_origin(earlier)} and {_origin(declared)})",
            activity=name,
        )
    DECLARED[name] = declared
    behaviour = type(pascal_case(name), (PythonActivity,), {"declared": declared})()
    outcomes = frozenset(declared.outcomes)
    register(
        Declaration(name, spec_of(declared), (), outcomes),
        behaviour,
        required=declared.required_inputs,
    )


def _origin(declared: ActivityDeclaration) -> str:
    return f"{declared.module}.{getattr(declared.function, '__qualname__', '?')}"


def spec_of(declared: ActivityDeclaration) -> ActivitySpec:
    """The spec Studio's activity descriptor is built from."""
    inputs = tuple(
        InputSpec(
            item.descriptor_name,
            item.type_name,
            item.description,
            ui_hint=EDITORS[item.editor],
            default=item.default,
            options=item.options,
        )
        for item in declared.inputs
    )
    outputs = tuple(OutputSpec(pascal_case(name)) for name in declared.outputs)
    return ActivitySpec(
        declared.category,
        declared.description,
        inputs=inputs,
        outputs=outputs,
        outcomes=declared.outcomes,
        kind="Task" if declared.run == "task" else "Action",
        display_name=declared.display_name,
    )


def call(declared: ActivityDeclaration, function: Callable[..., Any], inputs: Any) -> Answer:
    """Run the activity's function with its inputs; a retry it asks for (``RetryLater``, or an
    exception its policy names) carries its declared policy; anything else it raises faults."""
    policy = declared.retry.as_policy() if declared.retry is not None else None
    retry_on = declared.retry.on if declared.retry is not None else ()
    arguments = fit(declared, inputs)
    try:
        returned = function(**arguments)
    except RetryLater as exc:
        raise RetryLater(exc.message, delay=exc.delay, policy=policy) from exc
    except retry_on as exc:
        raise RetryLater(f"{type(exc).__name__}: {exc}", policy=policy) from exc
    answered = answer_of(returned, declared.outputs)
    try:
        json.dumps(answered, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise WorkflowFault(
            f"activity {declared.type_name!r} answered a value a workflow cannot hold ({exc}); "
            "return JSON values (str, int, float, bool, None, lists and dicts of them)"
        ) from None
    return answered


def fit(declared: ActivityDeclaration, inputs: Mapping[str, Any]) -> dict[str, Any]:
    """The inputs a call was scheduled with, fitted to the function's current signature (the
    versions rule, docs/activities.md): inputs it no longer takes are dropped, new ones take
    their default, and a new required one it has no value for faults the activity."""
    fitted: dict[str, Any] = {}
    for item in declared.inputs:
        if item.name in inputs:
            fitted[item.name] = inputs[item.name]
        elif item.required:
            raise WorkflowFault(
                f"activity {declared.type_name!r} now requires the input "
                f"{item.descriptor_name!r}, which this call was scheduled without (deploy a "
                "version that gives it a default, then replay)"
            )
        else:
            fitted[item.name] = item.default
    return fitted


class PythonActivity(Behaviour):
    """The behaviour of every Python activity: inline it calls the function in the step; in task
    mode it bookmarks and asks the runtime to run it on its queue, and resumes with the answer."""

    declared: ClassVar[ActivityDeclaration]

    def execute(self, ax: ActivityContext) -> None:
        declared = self.declared
        inputs = {item.name: ax.get(item.key, item.default) for item in declared.inputs}
        fake = ax.services.activities.get(declared.type_name)
        if declared.run == "task" and fake is None and not ax.services.inline_tasks:
            payload = {"activityType": declared.type_name, "taskId": ax.id}
            bookmark = ax.bookmark(TASK_BOOKMARK, payload)
            ax.emit(RunActivity(declared.type_name, inputs, bookmark["id"], declared.queue))
            return
        self.apply(ax, call(declared, fake or declared.function, inputs))

    def resume(self, ax: ActivityContext, bookmark: Mapping[str, Any], value: Any) -> None:
        if bookmark.get("name") == EVENT:
            waited = bookmark.get("then") or {}
            outputs = {**(waited.get("outputs") or {}), "result": value}
            # (the event's payload is the ``result`` output, declared or not)
            self.finish(ax, outputs, str(waited.get("outcome") or "Done"), also=("result",))
            return
        self.apply(ax, value if isinstance(value, Mapping) else {"outputs": {}})

    def apply(self, ax: ActivityContext, answer: Mapping[str, Any]) -> None:
        """Set the outputs and leave by the outcome the answer names (or wait, or fault)."""
        if "fault" in answer:
            code = answer.get("code")
            raise WorkflowFault(
                str(answer["fault"]),
                fault_code=str(code) if code else None,
                activity_id=ax.node.id,
            )
        wait = answer.get("wait")
        if isinstance(wait, Mapping):
            then = {"outputs": wait.get("outputs") or {}, "outcome": wait.get("outcome")}
            ax.bookmark(EVENT, {"eventName": str(wait.get("event"))}, then=then)
            return
        self.finish(ax, answer.get("outputs") or {}, str(answer.get("outcome") or "Done"))

    def finish(
        self,
        ax: ActivityContext,
        outputs: Mapping[str, Any],
        outcome: str,
        *,
        also: tuple[str, ...] = (),
    ) -> None:
        if outcome not in self.declared.outcomes:
            raise WorkflowFault(
                f"activity {self.declared.type_name!r} returned the undeclared outcome "
                f"{outcome!r} (declared: {', '.join(self.declared.outcomes)})",
                activity_id=ax.node.id,
            )
        undeclared = sorted(set(outputs) - set(self.declared.outputs) - set(also))
        if undeclared:
            raise WorkflowFault(
                f"activity {self.declared.type_name!r} returned the undeclared outputs "
                f"{undeclared} (declared: {', '.join(self.declared.outputs) or 'none'})",
                activity_id=ax.node.id,
            )
        for name, value in outputs.items():
            ax.set_output(camel_case(pascal_case(name)), value)
        ax.complete(outcome)

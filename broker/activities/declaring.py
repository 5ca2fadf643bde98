"""The declaration of a team's Python function (or class) declared as a workflow activity, with its
type name, Studio description, typed inputs, outputs, outcomes, retry policy and Celery queue."""

from __future__ import annotations

import dataclasses
import inspect
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, Literal

from broker.engine.model.definition import camel_case, pascal_case
from broker.errors import ActivityDeclarationError

__all__ = [
    "EDITORS",
    "ActivityDeclaration",
    "Input",
    "InputDeclaration",
    "Retry",
    "declare",
]

Mode = Literal["inline", "task"]

#: Studio's input editors by the name a declaration uses, and the UI hint Studio knows them by.
EDITORS: Mapping[str, str] = {
    "text": "singleline",
    "number": "singleline",
    "checkbox": "checkbox",
    "dropdown": "dropdown",
    "json": "json-editor",
    "multiline": "multiline",
}

#: Python annotations an input may have, and the Elsa type name Studio shows for each.
INPUT_TYPES: Mapping[Any, str] = {
    str: "String",
    int: "Int32",
    float: "Double",
    bool: "Boolean",
    dict: "Object",
    list: "Object",
    Any: "Object",
}

#: properties every activity in a workflow file has: an input may not take their names
RESERVED = frozenset(
    {"id", "type", "name", "version", "metadata", "customProperties", "canStartWorkflow"}
    | {"runAsynchronously", "nodeId", "displayText", "description", "source"}
)

#: the editor an input gets when its declaration names none
DEFAULT_EDITORS: Mapping[str, str] = {"Boolean": "checkbox", "Object": "json"}


@dataclasses.dataclass(frozen=True)
class Input:
    """How one input shows in Studio, given in ``@activity(inputs={name: Input(...)})``: its
    editor (text, number, checkbox, dropdown, json, multiline), dropdown options, description."""

    description: str = ""
    editor: str | None = None
    options: tuple[str, ...] = ()
    display_name: str | None = None


@dataclasses.dataclass(frozen=True)
class Retry:
    """The retry policy of an activity: how often it runs in all, and the backoff (seconds) between
    runs. A retry happens when the activity raises ``RetryLater`` or one of ``on``."""

    max_attempts: int = 3
    initial_delay: float = 1.0
    max_delay: float = 60.0
    on: tuple[type[BaseException], ...] = ()

    def as_policy(self) -> dict[str, Any]:
        """The policy in the shape of a workflow's ``customProperties.retry``."""
        return {
            "maxAttempts": self.max_attempts,
            "initialDelay": self.initial_delay,
            "maxDelay": self.max_delay,
        }


@dataclasses.dataclass(frozen=True)
class InputDeclaration:
    name: str  # the Python parameter
    type_name: str  # Elsa's type name (String, Int32, Double, Boolean, Object)
    required: bool
    default: Any
    editor: str
    options: tuple[str, ...] = ()
    description: str = ""
    display_name: str | None = None

    @property
    def descriptor_name(self) -> str:
        """The name Studio shows and writes (``card_token`` -> ``CardToken``)."""
        return pascal_case(self.name)

    @property
    def key(self) -> str:
        """The property a workflow file holds it under (``cardToken``)."""
        return camel_case(self.descriptor_name)


@dataclasses.dataclass(frozen=True)
class ActivityDeclaration:
    """Everything ``@activity`` declared about one activity, and the callable that runs it."""

    type_name: str
    function: Callable[..., Any]
    display_name: str
    category: str
    description: str
    inputs: tuple[InputDeclaration, ...]
    outputs: tuple[str, ...]
    outcomes: tuple[str, ...]
    retry: Retry | None
    queue: str | None
    run: Mode
    module: str
    #: seconds one call of a task-mode activity may run (None: ``BROKER_ACTIVITY_TIME_LIMIT``)
    time_limit: float | None = None

    @property
    def required_inputs(self) -> tuple[str, ...]:
        """The workflow-file keys of the inputs without a default."""
        return tuple(item.key for item in self.inputs if item.required)

    def signature(self) -> dict[str, Any]:
        """What a suspended instance's call depends on (docs/activities.md, versions)."""
        return {
            "inputs": {item.name: item.type_name for item in self.inputs},
            "required": list(self.required_inputs),
        }


def declare(
    type_name: str,
    target: Any,
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
) -> ActivityDeclaration:
    """The declaration of ``target`` (a function, or a class with a ``run`` method) as the
    activity ``type_name``; raises ``ActivityDeclarationError`` naming it when it is bad."""
    function = _callable_of(type_name, target)
    mode = run if run is not None else ("task" if queue else "inline")
    if mode not in ("inline", "task"):
        raise ActivityDeclarationError(
            f"activity {type_name!r}: run must be 'inline' or 'task', not {mode!r}",
            activity=type_name,
        )
    if "." not in type_name.strip(".") or not type_name.replace(".", "").isidentifier():
        raise ActivityDeclarationError(
            f"activity {type_name!r}: a type name is a dotted name, e.g. 'Orders.CheckStock'",
            activity=type_name,
        )
    _check_time_limit(type_name, mode, time_limit)
    for what, names in (("outputs", tuple(outputs)), ("outcomes", tuple(outcomes))):
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ActivityDeclarationError(
                f"activity {type_name!r}: {what} {repeated} are declared more than once",
                activity=type_name,
            )
    return ActivityDeclaration(
        type_name=type_name,
        function=function,
        display_name=display_name or type_name.rpartition(".")[2],
        category=category,
        description=description or (inspect.getdoc(target) or "").split("\n\n")[0],
        inputs=_inputs(type_name, function, dict(inputs or {})),
        outputs=tuple(outputs),
        outcomes=tuple(outcomes) or ("Done",),
        retry=retry,
        queue=queue,
        run=mode,
        module=str(getattr(target, "__module__", "")),
        time_limit=None if time_limit is None else float(time_limit),
    )


def _as_float(number: float) -> float:
    try:
        return float(number)
    except OverflowError:  # an int past a float's range
        return float("inf")


def _check_time_limit(type_name: str, mode: Mode, time_limit: float | None) -> None:
    if time_limit is None:
        return
    if mode != "task":
        raise ActivityDeclarationError(
            f"activity {type_name!r}: time_limit is for run='task' activities (an inline one runs "
            "in its workflow step, under BROKER_STEP_TIME_LIMIT)",
            activity=type_name,
        )
    if (
        isinstance(time_limit, bool)
        or not isinstance(time_limit, int | float)
        or not 0 < _as_float(time_limit) < float("inf")
    ):
        raise ActivityDeclarationError(
            f"activity {type_name!r}: time_limit must be a positive number of seconds, "
            f"not {time_limit!r}",
            activity=type_name,
        )


def _callable_of(type_name: str, target: Any) -> Callable[..., Any]:
    if inspect.isclass(target):
        method = getattr(target, "run", None)
        if not callable(method):
            raise ActivityDeclarationError(
                f"activity {type_name!r}: the class {target.__qualname__} has no run method",
                activity=type_name,
            )
        return typing.cast(Callable[..., Any], getattr(target(), "run"))  # noqa: B009
    if not callable(target):
        raise ActivityDeclarationError(
            f"activity {type_name!r}: only a function or a class can be declared",
            activity=type_name,
        )
    return typing.cast(Callable[..., Any], target)


def _inputs(
    type_name: str, function: Callable[..., Any], shown: dict[str, Input]
) -> tuple[InputDeclaration, ...]:
    try:
        hints = typing.get_type_hints(function)
    except (NameError, TypeError) as exc:
        raise ActivityDeclarationError(
            f"activity {type_name!r}: its annotations do not resolve ({exc})", activity=type_name
        ) from exc
    found: list[InputDeclaration] = []
    for parameter in inspect.signature(function).parameters.values():
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            continue
        hint = hints.get(parameter.name, Any)
        elsa_type = _elsa_type(hint)
        if elsa_type is None:
            raise ActivityDeclarationError(
                f"activity {type_name!r}: input {parameter.name!r} has the unknown type "
                f"{getattr(hint, '__name__', hint)!s} (use str, int, float, bool, dict or list)",
                activity=type_name,
                input=parameter.name,
            )
        if camel_case(pascal_case(parameter.name)) in RESERVED:
            raise ActivityDeclarationError(
                f"activity {type_name!r}: input {parameter.name!r} takes the name of a property "
                "every activity has in a workflow file (choose another)",
                activity=type_name,
                input=parameter.name,
            )
        ui = shown.pop(parameter.name, Input())
        editor = ui.editor or ("dropdown" if ui.options else None)
        editor = editor or DEFAULT_EDITORS.get(
            elsa_type, "number" if _numeric(elsa_type) else "text"
        )
        if editor not in EDITORS:
            raise ActivityDeclarationError(
                f"activity {type_name!r}: input {parameter.name!r} asks for the unknown editor "
                f"{editor!r} (one of {', '.join(EDITORS)})",
                activity=type_name,
                input=parameter.name,
            )
        if editor == "dropdown" and not ui.options:
            raise ActivityDeclarationError(
                f"activity {type_name!r}: input {parameter.name!r} has a dropdown without options "
                "(give Input(options=[...]))",
                activity=type_name,
                input=parameter.name,
            )
        required = parameter.default is inspect.Parameter.empty
        found.append(
            InputDeclaration(
                name=parameter.name,
                type_name=elsa_type,
                required=required,
                default=None if required else parameter.default,
                editor=editor,
                options=tuple(ui.options),
                description=ui.description,
                display_name=ui.display_name,
            )
        )
    if shown:
        raise ActivityDeclarationError(
            f"activity {type_name!r}: inputs {sorted(shown)} are not parameters of the function",
            activity=type_name,
        )
    return tuple(found)


def _numeric(elsa_type: str) -> bool:
    return elsa_type in ("Int32", "Double")


def _elsa_type(hint: Any) -> str | None:
    origin = typing.get_origin(hint)
    if origin in (types.UnionType, typing.Union):
        members = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        return _elsa_type(members[0]) if len(members) == 1 else None
    if origin is not None:
        return INPUT_TYPES.get(origin)
    return INPUT_TYPES.get(hint)

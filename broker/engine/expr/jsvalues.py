"""What a JavaScript expression is handed: the values its text names, supplied up front as JSON
(the sandbox registers no Python callable)."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import decimal
import enum
import json
import re
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from broker.engine.expr.jsapi import pascalize
from broker.engine.expr.scope import Scope

FLAGS = ("workflow", "last", "now")


@dataclasses.dataclass(frozen=True)
class Needs:
    """What an evaluation of one expression text supplies to the script: the names seen in its
    text, plus what earlier runs asked for that was not supplied (``getVariable(name)``)."""

    names: frozenset[str]
    activities: frozenset[str]
    flags: frozenset[str] = frozenset()  # of FLAGS: the instance, the last result, the clock
    learned: frozenset[tuple[str, str]] = frozenset()
    # Set once the script was seen to queue Promise jobs: it then runs in two steps, the jobs
    # drained in between while the evaluation is still open.
    asynchronous: bool = False

    def learn(self, misses: Iterable[tuple[str, str]]) -> Needs:
        learned = self.learned | frozenset(misses)
        return dataclasses.replace(
            self,
            names=self.names | {key for kind, key in learned if kind in ("variable", "input")},
            flags=self.flags | {kind for kind, _ in learned if kind in FLAGS},
            learned=learned,
        )


_IDENTIFIER = re.compile(r"[A-Za-z_$][\w$]*")
_OUTPUT_ACCESSOR = re.compile(r"get\w*?From(\w+)")
_needs_cache: dict[str, Needs] = {}
_NEEDS_CACHE_SIZE = 4096


def needs_of(code: str) -> Needs:
    needs = _needs_cache.get(code)
    if needs is not None:
        return needs
    tokens = set(_IDENTIFIER.findall(code))
    names = set(tokens)
    activities = set(tokens)
    for token in tokens:
        if token.startswith(("get", "set")) and len(token) > 3:
            rest = token[3:]
            names.update((rest, rest[0].lower() + rest[1:]))
        match = _OUTPUT_ACCESSOR.fullmatch(token)
        if match is not None:
            # get<Output>From<Activity>: the activity may itself contain "From"
            rest = token
            while (at := rest.find("From", 3)) >= 0:
                rest = rest[at + 4 :]
                if rest:
                    activities.add(rest)
    flags = set()
    if "getLastResult" in tokens:
        flags.add("last")
    if any(token.startswith(("getWorkflow", "setWorkflow")) for token in tokens):
        flags.add("workflow")
    if tokens & {"DateTime", "DateTimeOffset"}:
        flags.add("now")
    needs = Needs(frozenset(names), frozenset(activities), frozenset(flags))
    remember(code, needs)
    return needs


def remember(code: str, needs: Needs) -> None:
    if len(_needs_cache) >= _NEEDS_CACHE_SIZE:
        _needs_cache.clear()  # rare (thousands of distinct texts); cheaper than an LRU per hit
    _needs_cache[code] = needs


def supply(scope: Scope, needs: Needs) -> str:
    """The JSON text of the values this evaluation may read."""
    data: dict[str, Any] = {"c": scope.correlation_id, "w": scope.workflow_instance_id}
    names = needs.names
    variables: dict[str, Any] = {}
    inputs: dict[str, Any] = {}
    outputs: dict[str, Any] = {}
    if names:
        for name in scope.variable_names():
            if name in names and name not in variables:
                with contextlib.suppress(KeyError):
                    variables[name] = scope.get_variable(name)
        for name in scope.input_names():
            if name in names:
                with contextlib.suppress(KeyError):
                    inputs[name] = scope.get_input(name)
        activities = needs.activities
        for label in scope.activity_names():
            if label in activities or pascalize(label) in activities:
                with contextlib.suppress(KeyError):
                    outputs[label] = dict(scope.activity_outputs(label))
    for kind, key in needs.learned:
        if kind == "output" and key not in outputs:
            try:
                outputs[key] = dict(scope.activity_outputs(key))
            except KeyError:
                outputs[key] = None
    data["v"] = variables
    data["i"] = inputs
    data["o"] = outputs
    flags = needs.flags
    if flags:
        if "workflow" in flags:
            data["wf"] = dict(scope.workflow_info())
        if "last" in flags:
            data["last"] = scope.last_result()
        if "now" in flags:
            now = scope.now()
            if now.tzinfo is None:
                now = now.replace(tzinfo=datetime.UTC)
            data["now"] = now.timestamp() * 1000
    return _ENCODER.encode(data)


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime.datetime | datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, datetime.timedelta):
        return value.total_seconds()
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"a {type(value).__name__} is not JSON")


_ENCODER = json.JSONEncoder(default=_json_default, separators=(",", ":"), allow_nan=False)

"""Elsa's strategies as a workflow file names them: incident, activation, variable storage,
resilience (retries) and log persistence; their names, and how the parser reads and checks them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from broker.engine.model import log_persistence, shapes
from broker.engine.model.convert import parse_timespan
from broker.errors import WorkflowDefinitionError

#: Elsa's incident strategies (``options.incidentStrategyType``), by class name.
INCIDENT_STRATEGIES = {
    "FaultStrategy": "fault",
    "ContinueWithIncidentsStrategy": "continue",
}
#: Elsa's workflow activation strategies (``options.activationStrategyType``), by class name.
ACTIVATION_STRATEGIES = {
    "AllowAlwaysStrategy": "always",
    "SingletonStrategy": "singleton",
    "CorrelationStrategy": "correlation",
    "CorrelatedSingletonStrategy": "correlated-singleton",
}
_SHORT_NAMES = {
    "fault": "FaultStrategy",
    "continue": "ContinueWithIncidentsStrategy",
    "default": "AllowAlwaysStrategy",
    "always": "AllowAlwaysStrategy",
    "singleton": "SingletonStrategy",
    "correlation": "CorrelationStrategy",
    "correlatedsingleton": "CorrelatedSingletonStrategy",
}


#: Elsa's variable storage drivers (``storageDriverTypeName``), by class name. The workflow and
#: workflow-instance drivers keep the value in the instance's state; Memory keeps it only while
#: the instance runs in one go (it is gone after a suspension, as in a new Elsa process).
STORAGE_DRIVERS = {
    "WorkflowInstanceStorageDriver": "instance",
    "WorkflowStorageDriver": "instance",
    "MemoryStorageDriver": "memory",
}


def class_name(type_name: Any) -> str:
    """``"Elsa.Workflows.MemoryStorageDriver, Elsa.Workflows.Core"`` -> ``MemoryStorageDriver``."""
    return str(type_name).split(",")[0].strip().rsplit(".", 1)[-1]


def strategy_name(value: Any, known: Mapping[str, str]) -> str | None:
    """A strategy option as Studio writes it, mapped through ``known``; None when absent.

    Studio stores the type's simple assembly-qualified name
    (``Elsa.Workflows.IncidentStrategies.ContinueWithIncidentsStrategy, Elsa.Workflows.Core``);
    the bare class name and the short word (``Continue``, ``Singleton``) are accepted too. Raises
    ``ValueError`` for anything else.
    """
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise ValueError(f"{value!r} is not a type name")
    simple = class_name(value)
    simple = _SHORT_NAMES.get(simple.lower(), simple)
    if simple not in known:
        raise ValueError(f"{value!r} is not one of {', '.join(known)}")
    return known[simple]


def _refuse(file: str | None, reason: str, path: str) -> WorkflowDefinitionError:
    return WorkflowDefinitionError(reason, file=file, path=path)


def read_resilience(custom: dict[str, Any], path: str, file: str | None) -> None:
    """Elsa's ``customProperties.resilienceStrategy`` becomes the activity's retry policy.

    The strategy must be written inline (``{"mode": "Expression", "expression": {"type":
    "Object", "value": {...HttpResilienceStrategy...}}}``): the broker has no catalog of named
    strategies, so ``mode: Identifier`` is refused. ``maxRetryAttempts`` (3) retries after the
    first attempt, ``delay`` ("00:00:01" or seconds) is the first wait; ``Exponential``
    (default) doubles it up to the settings' maximum, ``Constant`` keeps it. The broker always
    adds jitter.
    """
    config = custom.get("resilienceStrategy")
    if config is None:
        return
    where = f"{path}.resilienceStrategy"
    if "retry" in custom:
        raise _refuse(file, "set resilienceStrategy or retry, not both", where)
    if not isinstance(config, Mapping):
        raise _refuse(file, "must be an object", where)
    mode = str(config.get("mode", "Identifier"))
    if mode.lower() != "expression":
        raise _refuse(
            file,
            f"resilience strategy {config.get('strategyId')!r} by identifier is not "
            "supported (the broker has no strategy catalog): write it inline with mode "
            "Expression and an Object value",
            f"{where}.mode",
        )
    expression = config.get("expression")
    if not isinstance(expression, Mapping) or expression.get("type") not in (
        "Object",
        "Json",
        "Literal",
    ):
        raise _refuse(
            file,
            "the strategy must be an Object, Json or Literal expression (known at load)",
            f"{where}.expression",
        )
    value = expression.get("value")
    try:
        strategy = shapes.json_text(value) if isinstance(value, str) else value
    except ValueError as exc:
        raise _refuse(file, f"malformed JSON: {exc}", f"{where}.expression.value") from exc
    if not isinstance(strategy, Mapping):
        raise _refuse(file, "the strategy must be an object", f"{where}.expression.value")
    custom["retry"] = _retry_from_strategy(strategy, f"{where}.expression.value", file)


def _retry_from_strategy(
    strategy: Mapping[str, Any], path: str, file: str | None
) -> dict[str, Any]:
    known = {"$type", "id", "displayName", "maxRetryAttempts", "delay", "backoffType"}
    known |= {"useJitter"}
    for key in strategy:
        if key not in known:
            raise _refuse(file, f"unsupported resilience setting {key!r}", f"{path}.{key}")
    kind = strategy.get("$type", "HttpResilienceStrategy")
    if kind != "HttpResilienceStrategy":
        raise _refuse(file, f"resilience strategy type {kind!r} is not supported", path)
    retries = strategy.get("maxRetryAttempts", 3)
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise _refuse(file, "must be a whole number, 0 or more", f"{path}.maxRetryAttempts")
    try:
        delay = parse_timespan(strategy.get("delay", 1))
    except ValueError as exc:
        raise _refuse(file, str(exc), f"{path}.delay") from exc
    backoff = strategy.get("backoffType", "Exponential")
    retry: dict[str, Any] = {"maxAttempts": retries + 1, "initialDelay": delay}
    if backoff == "Constant":
        retry["maxDelay"] = delay
    elif backoff != "Exponential":
        raise _refuse(
            file,
            f"backoffType {backoff!r} is not supported (Exponential or Constant)",
            f"{path}.backoffType",
        )
    return retry


def check_log_persistence(custom: Mapping[str, Any], path: str, file: str | None) -> None:
    """Elsa's ``logPersistenceMode`` / ``logPersistenceConfig``: what the execution journal
    keeps of an activity's inputs and outputs (``log_persistence``). Include, Exclude,
    Inherit and Configuration (the broker's default) are honoured; a mode chosen by an
    expression, or one the broker does not know, is refused rather than guessed."""
    for key in log_persistence.KEYS:
        section = custom.get(key)
        if section is None:
            continue
        if not isinstance(section, Mapping):
            raise _refuse(file, "must be an object", f"{path}.{key}")
        for where, entry in _log_entries(section, f"{path}.{key}"):
            if isinstance(entry, Mapping):
                evaluation = str(entry.get("evaluationMode") or "Strategy")
                if evaluation.lower() != "strategy":
                    raise _refuse(
                        file,
                        f"log persistence chosen by {evaluation!r} is not supported "
                        "(a strategy: Include, Exclude or Inherit)",
                        f"{where}.evaluationMode",
                    )
                if log_persistence.mode_of(entry) is None or not _known_strategy(entry):
                    raise _refuse(
                        file,
                        f"log persistence strategy {class_name(entry.get('strategyType'))!r}"
                        " is not supported (Include, Exclude or Inherit)",
                        f"{where}.strategyType",
                    )
            elif log_persistence.mode_of(entry) is None:
                raise _refuse(
                    file,
                    f"log persistence mode {entry!r} is not supported "
                    "(Include, Exclude or Inherit)",
                    where,
                )


def _log_entries(section: Mapping[str, Any], path: str) -> Iterator[tuple[str, Any]]:
    """(JSON path, entry) of every mode entry of a log-persistence section, legacy or current."""
    for key, value in section.items():
        where = f"{path}.{key}"
        if isinstance(value, Mapping) and not value.keys() & {"strategyType", "evaluationMode"}:
            yield from _log_entries(value, where)
        else:
            yield where, value


def _known_strategy(entry: Mapping[str, Any]) -> bool:
    strategy = entry.get("strategyType")
    if strategy is None or not str(strategy).strip():
        return True  # no strategy named: Inherit
    return class_name(strategy).lower() in log_persistence.STRATEGIES

"""Elsa's strategies as a workflow file names them: incident, activation, variable storage,
resilience (retries) and log persistence; their names, and how the parser reads and checks them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from broker.engine.model import log_persistence, shapes
from broker.engine.model.resilience import EXPRESSION, IDENTIFIER, StrategyError, parse_strategy
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
    """Check Elsa's ``customProperties.resilienceStrategy`` (``ResilienceStrategyConfig``): a
    strategy named by id (``mode: Identifier``, resolved at run time from the configured ones,
    as Elsa's catalog does), or chosen by an expression (``mode: Expression``); an inline
    strategy (an Object, Json or Literal object) must be an ``HttpResilienceStrategy``. What it
    retries is the HTTP activity's business (``broker.engine.activities.http.outbound``)."""
    config = custom.get("resilienceStrategy")
    if config is None:
        return
    where = f"{path}.resilienceStrategy"
    if not isinstance(config, Mapping):
        raise _refuse(file, "must be an object", where)
    fields = {str(k).lower(): v for k, v in config.items()}
    mode = fields.get("mode", IDENTIFIER)
    if mode in (0, "0") or str(mode).lower() == IDENTIFIER.lower():
        strategy_id = fields.get("strategyid")
        if not isinstance(strategy_id, str) or not strategy_id.strip():
            raise _refuse(file, "strategyId must name a strategy", f"{where}.strategyId")
        return
    if not (mode in (1, "1") or str(mode).lower() == EXPRESSION.lower()):
        raise _refuse(file, f"mode {mode!r} is not Identifier or Expression", f"{where}.mode")
    expression = fields.get("expression")
    if not isinstance(expression, Mapping) or not isinstance(expression.get("type"), str):
        raise _refuse(file, "must be an expression object", f"{where}.expression")
    if expression["type"] not in ("Object", "Json", "Literal"):
        return  # evaluated at run time: a strategy object, or a configured strategy's id
    value = expression.get("value")
    try:
        strategy = shapes.json_text(value) if isinstance(value, str) else value
    except ValueError:
        strategy = value  # a Literal naming a configured strategy
    if isinstance(strategy, str):
        return
    try:
        parse_strategy(strategy, where="strategy")
    except StrategyError as exc:
        raise _refuse(file, str(exc), f"{where}.expression.value") from exc


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

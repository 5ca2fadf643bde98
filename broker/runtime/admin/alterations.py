"""Elsa's alterations of a saved workflow instance: ScheduleActivity, ModifyVariable, Migrate and
Cancel, read from Elsa's JSON (``{"type": "ScheduleActivity", "activityId": ...}``) and applied
to a copy of the instance's state; ``alteration_jobs`` runs them on instances.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

from broker.engine.model.definition import Activity, Variable, WorkflowDefinition
from broker.errors import BadRequest
from broker.registry.files import MAX_VERSION
from broker.safety.bounded import parse_int
from broker.store.models import utcnow

SCHEDULE_ACTIVITY, MODIFY_VARIABLE, MIGRATE, CANCEL = (
    "ScheduleActivity",
    "ModifyVariable",
    "Migrate",
    "Cancel",
)
#: Elsa's alteration types, by their ``type`` discriminator
TYPES = (SCHEDULE_ACTIVITY, MODIFY_VARIABLE, MIGRATE, CANCEL)


def parse(raw: Any, field: str = "alterations") -> list[dict[str, Any]]:
    """Elsa's alteration list, checked: ``BadRequest`` naming the field of the first bad one."""
    if not isinstance(raw, list) or not raw:
        raise BadRequest(f"{field} must be a non-empty list of alterations", field=field)
    parsed: list[dict[str, Any]] = []
    for index, item in enumerate(raw):
        where = f"{field}[{index}]"
        if not isinstance(item, Mapping):
            raise BadRequest(f"{where} must be an object", field=where)
        kind = _pick(item, "type")
        if kind not in TYPES:
            raise BadRequest(
                f"{where}.type must be one of {', '.join(TYPES)}", field=f"{where}.type"
            )
        if kind == SCHEDULE_ACTIVITY:
            activity_id = _text(item, "activityId", where)
            instance_id = _text(item, "activityInstanceId", where)
            if activity_id is None and instance_id is None:
                raise BadRequest(
                    f"{where} needs activityId or activityInstanceId",
                    field=f"{where}.activityId",
                )
            parsed.append(
                {
                    "type": kind,
                    "activityId": activity_id,
                    "activityInstanceId": instance_id,
                }
            )
        elif kind == MODIFY_VARIABLE:
            variable_id = _text(item, "variableId", where)
            if variable_id is None:
                raise BadRequest(f"{where}.variableId is required", field=f"{where}.variableId")
            parsed.append({"type": kind, "variableId": variable_id, "value": _pick(item, "value")})
        elif kind == MIGRATE:
            target = _pick(item, "targetVersion")
            if isinstance(target, bool) or not isinstance(target, int):
                raise BadRequest(
                    f"{where}.targetVersion must be a version number (1 or more)",
                    field=f"{where}.targetVersion",
                )
            parse_int(target, f"{where}.targetVersion", low=1, high=MAX_VERSION)
            parsed.append({"type": kind, "targetVersion": target})
        else:
            parsed.append({"type": kind})
    return parsed


#: what a summary names of each alteration (never a ModifyVariable's value)
_NAMED = ("activityId", "activityInstanceId", "variableId", "targetVersion")
#: alterations a summary lists one by one; the rest are counted
SUMMARY_ITEMS = 20
SUMMARY_TEXT = 200


def summary(parsed: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """What an audit trail says of parsed alterations: each one's type and the activity, variable
    or version it names (ids cut to ``SUMMARY_TEXT``), at most ``SUMMARY_ITEMS`` of them; never
    the values they set."""
    found: list[dict[str, Any]] = []
    for alteration in parsed[:SUMMARY_ITEMS]:
        entry: dict[str, Any] = {"type": alteration["type"]}
        for name in _NAMED:
            value = alteration.get(name)
            if isinstance(value, str):
                entry[name] = value[:SUMMARY_TEXT]
            elif isinstance(value, int):
                entry[name] = value
        found.append(entry)
    if len(parsed) > SUMMARY_ITEMS:
        found.append({"type": "...", "more": len(parsed) - SUMMARY_ITEMS})
    return found


def _pick(item: Mapping[str, Any], name: str) -> Any:
    """A property by its camelCase name or Elsa's PascalCase one."""
    if name in item:
        return item[name]
    return item.get(name[0].upper() + name[1:])


def _text(item: Mapping[str, Any], name: str, where: str) -> str | None:
    value = _pick(item, name)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise BadRequest(f"{where}.{name} must be a string", field=f"{where}.{name}")
    return value


@dataclasses.dataclass
class Log:
    """Elsa's ``AlterationLog``: entries with a level; any Error makes the job fail."""

    entries: list[dict[str, Any]] = dataclasses.field(default_factory=list)

    def add(self, message: str, level: str = "Information", event: str | None = None) -> None:
        self.entries.append(
            {
                "message": message,
                "logLevel": level,
                "timestamp": iso(utcnow()),
                "eventName": event,
            }
        )

    @property
    def failed(self) -> bool:
        return any(e["logLevel"] == "Error" for e in self.entries)


def iso(value: dt.datetime) -> str:
    return value.isoformat().replace("+00:00", "Z")


@dataclasses.dataclass(frozen=True)
class Target:
    """What an alteration may read: the instance's definition, and the version Migrate asked
    for (looked up by the caller, who owns the registry)."""

    definition: WorkflowDefinition
    versions: Mapping[int, WorkflowDefinition]


def apply(
    state: dict[str, Any],
    alterations: Sequence[Mapping[str, Any]],
    target: Target,
    log: Log,
) -> bool:
    """Apply ``alterations`` to ``state`` (changed in place); answers whether a Cancel was asked
    (the caller cancels through the domain layer). Failures are logged as errors."""
    cancel = False
    for alteration in alterations:
        kind = alteration["type"]
        if kind == SCHEDULE_ACTIVITY:
            _schedule(state, alteration, log)
        elif kind == MODIFY_VARIABLE:
            _modify_variable(state, alteration, target.definition, log)
        elif kind == MIGRATE:
            _migrate(state, int(alteration["targetVersion"]), target, log)
        else:
            cancel = True
            log.add("Workflow instance cancellation requested", event="Cancel")
    return cancel


def _schedule(state: dict[str, Any], alteration: Mapping[str, Any], log: Log) -> None:
    """Schedule an existing activity instance again (the faulted one a retry names): it goes to
    the head of the queue, so the next run starts there."""
    contexts: dict[str, Any] = state.get("contexts") or {}
    wanted_instance, wanted_activity = (
        alteration["activityInstanceId"],
        alteration["activityId"],
    )
    ctx = contexts.get(wanted_instance) if wanted_instance else None
    if ctx is None and wanted_activity:
        matching = [c for c in contexts.values() if c.get("node") == wanted_activity]
        ctx = matching[-1] if matching else None
    if ctx is None:
        log.add(
            f"No execution context of activity {wanted_activity or wanted_instance!r} is left to "
            "schedule (only activities of an unfinished instance can be scheduled again)",
            "Error",
        )
        return
    ctx["status"] = "Scheduled"
    queue: list[str] = state.setdefault("queue", [])
    if ctx["id"] in queue:
        queue.remove(ctx["id"])
    queue.insert(0, ctx["id"])
    log.add(
        f"Scheduled activity {ctx.get('node')!r} ({ctx['id']})",
        event="ActivityScheduled",
    )


def _modify_variable(
    state: dict[str, Any],
    alteration: Mapping[str, Any],
    definition: WorkflowDefinition,
    log: Log,
) -> None:
    """Set a declared variable (found by id, or by name) in the scope that holds it."""
    wanted = str(alteration["variableId"])
    found = _find_variable(definition, wanted)
    if found is None:
        log.add(f"Variable with ID {wanted} not found", "Error")
        return
    owner, variable = found
    scopes = [
        ctx["scope"]
        for ctx in (state.get("contexts") or {}).values()
        if isinstance(ctx.get("scope"), dict)
        and variable.name in ctx["scope"].get("vars", {})
        and (owner is None or ctx.get("node") in (owner.id, None))
    ]
    value = alteration.get("value")
    if scopes:
        for scope in scopes:
            scope["vars"][variable.name] = value
    elif variable.name in (state.get("variables") or {}):
        state["variables"][variable.name] = value
    else:
        log.add(f"No scope holds variable {variable.name!r} in this instance", "Error")
        return
    log.add(f"Variable {variable.name!r} modified", event="VariableModified")


def _find_variable(
    definition: WorkflowDefinition, wanted: str
) -> tuple[Activity | None, Variable] | None:
    """The variable with id (or name) ``wanted`` and the activity declaring it (None: the
    workflow)."""
    for variable in definition.variables:
        if wanted in (variable.id, variable.name):
            return None, variable
    for node in definition.nodes.values():
        for variable in node.variables:
            if wanted in (variable.id, variable.name):
                return node, variable
    return None


def _migrate(state: dict[str, Any], version: int, target: Target, log: Log) -> None:
    """Move the instance to another version of its definition: every activity it has open must
    exist there (by id), else nothing changes."""
    new = target.versions.get(version)
    old = target.definition
    if new is None:
        log.add(
            f"Workflow definition with ID {old.definition_id} and version {version} not found",
            "Error",
        )
        return
    contexts = (state.get("contexts") or {}).values()
    missing = sorted(
        {
            str(c["node"])
            for c in contexts
            if c.get("def") == old.id and c.get("node") and c["node"] not in new.nodes
        }
    )
    if missing:
        log.add(f"Version {version} has no activity {', '.join(missing)}", "Error")
        return
    for ctx in contexts:
        if ctx.get("def") == old.id:
            ctx["def"] = new.id
    state["definitionVersionId"], state["version"] = new.id, new.version
    log.add(f"Migrated from version {old.version} to {new.version}", event="Migrated")

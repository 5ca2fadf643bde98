"""Elsa's ``StateMachine``: named states with entry and exit activities, and transitions that a
trigger activity starts, a condition allows and an action accompanies."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from broker.engine.activities.base import Behaviour, CompletedChild, activity
from broker.engine.model.specs import ActivitySpec
from broker.engine.model.values import as_bool
from broker.engine.run.activity_context import ActivityContext

#: the activity context property holding the current state (Elsa's name)
CURRENT_STATE = "CurrentState"
#: this activity's own bookkeeping: which child context runs for which purpose
_CALLBACKS = "callbacks"
ENTRY, TRIGGER, ACTION, EXIT = "entry", "trigger", "action", "exit"
ENTERING = "Entering"  # Elsa's tag of a state's entry activity


def transition_key(index: int, transition: Mapping[str, Any]) -> str:
    """Elsa's transition key: its place among the transitions, and its name (or ends)."""
    name = transition.get("name")
    shown = (
        name
        if isinstance(name, str) and name.strip()
        else (f"{transition['from']}->{transition['to']}")
    )
    return f"{index}:{shown}"


@activity(
    "Elsa.StateMachine",
    ActivitySpec(
        "Flow",
        "Executes a state machine made of named states and trigger-driven transitions.",
    ),
    outbound=("Done",),
)
class StateMachine(Behaviour):
    """Entering a state runs its entry, then arms the triggers of its outbound transitions (to
    states that exist) at once. The first trigger to complete whose condition holds (none means
    true) wins: the competing triggers are cancelled, then the transition's action, the source
    state's exit, and the target state is entered. A false condition re-arms that trigger. A
    state with no armed trigger completes the activity. The current state is the context
    property ``CurrentState``; a completion that no longer belongs to it is ignored."""

    def execute(self, ax: ActivityContext) -> None:
        current = ax.props.get(CURRENT_STATE) or ax.node.properties.get("currentState")
        if not _named(current):
            current = ax.node.properties.get("initialState")
        set_current(ax, current if _named(current) else None)
        if find_state(ax, current_state(ax)) is None:
            ax.complete()
            return
        enter_state(ax)

    def on_child_completed(self, ax: ActivityContext, child: CompletedChild) -> None:
        callback = ax.props.get(_CALLBACKS, {}).pop(child.context_id, None)
        if callback is None:
            return
        kind, key = callback
        if kind == ENTRY:
            arm_triggers(ax)
        elif kind == TRIGGER:
            trigger_completed(ax, key, child)
        else:
            found = find_transition(ax, key)
            if found is None or not is_current_source(ax, found[1]):
                return  # stale: the machine moved on while this ran
            if kind == ACTION:
                exit_state(ax, *found)
            else:
                complete_transition(ax, found[1])


def _named(value: Any) -> bool:
    return isinstance(value, str) and bool(value.strip())


def states(ax: ActivityContext) -> list[Mapping[str, Any]]:
    return list(ax.node.properties.get("states") or ())


def transitions(ax: ActivityContext) -> list[Mapping[str, Any]]:
    return list(ax.node.properties.get("transitions") or ())


def current_state(ax: ActivityContext) -> str | None:
    found = ax.props.get(CURRENT_STATE)
    return found if isinstance(found, str) else None


def set_current(ax: ActivityContext, state: str | None) -> None:
    if state is None:
        ax.props.pop(CURRENT_STATE, None)
    else:
        ax.props[CURRENT_STATE] = state


def find_state(ax: ActivityContext, name: str | None) -> Mapping[str, Any] | None:
    if not _named(name):
        return None
    return next((s for s in states(ax) if s["name"] == name), None)


def outbound(ax: ActivityContext, source: str | None) -> list[tuple[int, Mapping[str, Any]]]:
    if not _named(source):
        return []
    return [(i, t) for i, t in enumerate(transitions(ax)) if t["from"] == source]


def find_transition(ax: ActivityContext, key: str) -> tuple[int, Mapping[str, Any]] | None:
    """The transition of ``key``: among the current state's outbound ones first, then all."""
    for index, transition in [*outbound(ax, current_state(ax)), *enumerate(transitions(ax))]:
        if transition_key(index, transition) == key:
            return index, transition
    return None


def is_current_source(ax: ActivityContext, transition: Mapping[str, Any]) -> bool:
    return bool(transition["from"] == current_state(ax))


def schedule(ax: ActivityContext, port: str, kind: str, key: str) -> None:
    context_id = ax.schedule(ax.node.ports[port])
    ax.props.setdefault(_CALLBACKS, {})[context_id] = [kind, key]


def enter_state(ax: ActivityContext) -> None:
    state = find_state(ax, current_state(ax))
    if state is None:
        ax.complete()
        return
    if state.get("entry"):
        schedule(ax, state["entry"], ENTRY, ENTERING)
        return
    arm_triggers(ax)


def arm_triggers(ax: ActivityContext) -> None:
    armed = [
        (index, transition)
        for index, transition in outbound(ax, current_state(ax))
        if transition.get("trigger") and find_state(ax, transition["to"]) is not None
    ]
    if not armed:
        ax.complete()
        return
    for index, transition in armed:
        schedule(ax, transition["trigger"], TRIGGER, transition_key(index, transition))


def trigger_completed(ax: ActivityContext, key: str, child: CompletedChild) -> None:
    found = find_transition(ax, key) or next(
        (
            (index, transition)
            for index, transition in outbound(ax, current_state(ax))
            if transition.get("trigger")
            and ax.node.ports[transition["trigger"]].id == child.node.id
        ),
        None,
    )
    if found is None:
        return
    index, transition = found
    if not is_current_source(ax, transition) or find_state(ax, transition["to"]) is None:
        return
    condition = transition.get("condition")
    allowed = condition is None or as_bool(ax.evaluate(condition["expression"], "Boolean"))
    if not allowed:
        schedule(ax, transition["trigger"], TRIGGER, key)  # re-armed until another one wins
        return
    cancel_competing_triggers(ax, index, transition)
    if transition.get("action"):
        schedule(ax, transition["action"], ACTION, key)
        return
    exit_state(ax, index, transition)


def cancel_competing_triggers(
    ax: ActivityContext, winner_index: int, winner: Mapping[str, Any]
) -> None:
    """Cancel what runs of the other triggers of the winner's source state."""
    competing = {
        ax.node.ports[t["trigger"]].id
        for index, t in outbound(ax, winner["from"])
        if index != winner_index and t.get("trigger")
    }
    callbacks = ax.props.get(_CALLBACKS, {})
    for ctx in ax.children():
        node = ax.run.node(ctx)
        if node.id in competing:
            if ctx["status"] != "Scheduled":  # one that never started has nothing to record
                ax.run.record(ctx, node, "Cancelled")
            ax.run.cancel_context(ctx)
            callbacks.pop(ctx["id"], None)


def exit_state(ax: ActivityContext, index: int, transition: Mapping[str, Any]) -> None:
    source = find_state(ax, transition["from"])
    if source is not None and source.get("exit"):
        schedule(ax, source["exit"], EXIT, transition_key(index, transition))
        return
    complete_transition(ax, transition)


def complete_transition(ax: ActivityContext, transition: Mapping[str, Any]) -> None:
    set_current(ax, transition["to"])
    enter_state(ax)

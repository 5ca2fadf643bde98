"""The soak's request types (one workflow each) and what each one must leave behind.

Every kind is a workflow document plus the client's part: a plain submission, a submission then
an event, a submission then a cancellation, or a call of an ``HttpEndpoint`` trigger. ``effect``
names the receiver path the workflow calls once (None: no call), which the checks count.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from tests.support.workflows import (
    activity,
    literal,
    obj,
    post_to,
    resilient,
    set_output,
    workflow,
)

EVENT = "soak-go"
NEVER = "soak-never"
TRIGGER_PATH = "soak-trigger"
TIMER = "00:00:03"


@dataclasses.dataclass(frozen=True)
class Kind:
    """One request type of the mix."""

    request_type: str
    effect: str | None  # receiver path called once per request, or None
    follow_up: str | None = None  # "event" or "cancel", sent a second after acceptance
    trigger: bool = False  # started through POST /workflows/<path> instead of POST /requests
    expected: str = "Completed"


#: poison work: a RunTask whose task kills its pool process (a segfault, ``os._exit``) every time;
#: dead-lettered after BROKER_MAX_WORKER_DEATHS deaths, its request Faulted (never lost)
POISON_KINDS = (
    Kind("SoakPoisonSegfault", None, expected="Faulted"),
    Kind("SoakPoisonExit", None, expected="Faulted"),
)
#: one arrival in this many is poison (at 2 a second, one every 50 s: each costs the pool three
#: processes, which the machine must absorb beside the load)
POISON_EVERY = 100
#: the module of the poison tasks, listed in BROKER_TASK_MODULES by the soak's roles
POISON_TASKS = "tests.chaos.poison_tasks"

KINDS = (
    Kind("SoakStraight", None),
    Kind("SoakEvent", "/effect/event", follow_up="event"),
    Kind("SoakTimer", "/effect/timer"),
    Kind("SoakParent", "/effect/child"),
    Kind("SoakHttp", "/flaky"),
    Kind("SoakTrigger", "/effect/trigger", trigger=True),
    Kind("SoakCancel", None, follow_up="cancel", expected="Cancelled"),
)
#: a cancelled request's workflow must never reach its call
CANCELLED_EFFECT = "/effect/cancel"


#: every kind, the poison ones included
ALL_KINDS = (*KINDS, *POISON_KINDS)


def kind_of(n: int) -> Kind:
    """The kind of arrival ``n``: the kinds in turn, one in ``POISON_EVERY`` poison instead."""
    if n % POISON_EVERY == POISON_EVERY - 1:
        return POISON_KINDS[(n // POISON_EVERY) % len(POISON_KINDS)]
    return KINDS[n % len(KINDS)]


def documents(base: str, poison: dict[str, str] | None = None) -> dict[str, dict[str, Any]]:
    """The workflow files, calling the receiver at ``base`` (``http://host:port``); ``poison``:
    the poison tasks' payload (``switch`` and ``attempts`` files, ``tests/chaos/poison_tasks``)."""
    done = set_output("out", "result", {"ok": True})
    poisoned = {
        f"soak-poison-{name}": workflow(
            f"soak-poison-{name}",
            [
                activity(
                    "poison",
                    "Elsa.RunTask",
                    taskName=literal(f"poison.{name}"),
                    payload=obj(poison or {}),
                ),
                done,
            ],
            request_type=kind.request_type,
        )
        for name, kind in zip(("segfault", "exit"), POISON_KINDS, strict=True)
    }
    return {
        **poisoned,
        "soak-straight": workflow("soak-straight", [done], request_type="SoakStraight"),
        "soak-event": workflow(
            "soak-event",
            [
                activity("wait", "Elsa.Event", eventName=literal(EVENT)),
                post_to("call", base + "/effect/event"),
                done,
            ],
            request_type="SoakEvent",
        ),
        "soak-timer": workflow(
            "soak-timer",
            [
                activity("delay", "Elsa.Delay", timeSpan=literal(TIMER)),
                post_to("call", base + "/effect/timer"),
                done,
            ],
            request_type="SoakTimer",
        ),
        "soak-parent": workflow(
            "soak-parent",
            [
                activity(
                    "dispatch",
                    "Elsa.DispatchWorkflow",
                    workflowDefinitionId=literal("soak-child"),
                    waitForCompletion=literal(True),
                    input=obj({"n": 1}),
                ),
                done,
            ],
            request_type="SoakParent",
        ),
        "soak-child": workflow("soak-child", [post_to("call", base + "/effect/child")]),
        "soak-http": workflow(
            "soak-http",
            # a 503 is an answer: the activity's resilience strategy retries it (Elsa's way)
            [
                resilient(
                    post_to("call", base + "/flaky"),
                    maxRetryAttempts=8,
                    delay="00:00:00.5",
                ),
                done,
            ],
            request_type="SoakHttp",
            retry={"maxAttempts": 8, "initialDelay": 0.5, "maxDelay": 2},
        ),
        "soak-cancel": workflow(
            "soak-cancel",
            [
                activity("wait", "Elsa.Event", eventName=literal(NEVER)),
                post_to("call", base + CANCELLED_EFFECT),
            ],
            request_type="SoakCancel",
        ),
        "soak-trigger": workflow(
            "soak-trigger",
            [
                {
                    "id": "endpoint",
                    "type": "Elsa.HttpEndpoint",
                    "version": 1,
                    "canStartWorkflow": True,
                    "path": literal(TRIGGER_PATH),
                    "supportedMethods": {
                        "typeName": "String[]",
                        "expression": {"type": "Object", "value": '["POST"]'},
                    },
                },
                post_to("call", base + "/effect/trigger"),
                done,
            ],
            request_type="SoakTrigger",
        ),
    }

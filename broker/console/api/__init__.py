"""The Elsa Workflows API that Elsa Studio calls, answered from Python under ``/elsa/api``.

One blueprint, split by resource: ``server`` (features, package version), ``descriptors``
(activities, expressions, variable types, strategies), ``definitions`` (with ``bulk`` actions
and ``versions``), ``runs`` (execute and dispatch), ``instances``, ``executions`` (activity
execution records), ``runtime_admin`` (bookmark-queue dead letters, workflow-runtime status),
``alterations`` (retry, alteration plans) and ``scripting`` (the script editor's TypeScript
declarations). Every route declares the role it needs (``broker.console.roles``): viewers read,
designers also save, publish and run, operators also cancel, replay, alter and pause.

The console app that registers ``blueprint`` authenticates the caller (``g.console_principal``)
and puts a ``broker.ingress.context.Services`` in ``app.extensions["broker"]`` whose ``registry``
is the ``broker.registry.WorkflowRegistry`` (definitions are listed and published through it).
Shapes follow Elsa 3 (camelCase; lists as ``{items, count}``, pages as ``{items, totalCount}``);
errors as Elsa's endpoints answer them (``{statusCode, message, errors: {generalErrors: [...]}}``).
"""

from broker.console.api import activity_tests, descriptors, runs, runtime_admin, scripting, server
from broker.console.api.base import blueprint
from broker.console.api.definitions import bulk, versions
from broker.console.api.definitions import routes as definitions
from broker.console.api.instances import (
    alterations,
    executions,
)
from broker.console.api.instances import (
    routes as instances,
)
from broker.console.api.instances import (
    state as instance_state,
)

__all__ = [
    "activity_tests",
    "alterations",
    "blueprint",
    "bulk",
    "definitions",
    "descriptors",
    "executions",
    "instance_state",
    "instances",
    "runs",
    "runtime_admin",
    "scripting",
    "server",
    "versions",
]

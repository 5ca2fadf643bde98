"""The Elsa Workflows API that Elsa Studio calls, answered from Python under ``/elsa/api``
(docs/design.md, section 1)."""

from broker.console.api import (
    activity_tests,
    descriptors,
    openapi,
    operator_audit,
    resilience,
    runs,
    runtime_admin,
    scripting,
    server,
    simulate_response,
)
from broker.console.api.base import blueprint
from broker.console.api.definitions import bulk, consumers, imports, versions
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
    "consumers",
    "definitions",
    "descriptors",
    "executions",
    "imports",
    "instance_state",
    "instances",
    "openapi",
    "operator_audit",
    "resilience",
    "runs",
    "runtime_admin",
    "scripting",
    "server",
    "simulate_response",
    "versions",
]

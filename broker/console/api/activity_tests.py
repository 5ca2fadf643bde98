"""The designer's Test tab (Elsa's ``tests/activities``): answered, never left to fail."""

from __future__ import annotations

from typing import Any

from broker.console.api.base import blueprint
from broker.console.api.openapi import (
    OBJECT,
    documented,
)
from broker.console.api.params import body_object
from broker.console.roles import require

REASON = (
    "Testing one activity alone is not supported by this broker: publish and Run the workflow, "
    "then inspect each activity in the instance viewer"
)


@blueprint.post("/tests/activities")
@require("designer")
@documented(body=OBJECT)
def test_activity() -> dict[str, Any]:
    body_object(definition=True, wrapped=True)  # a malformed body is still refused as such
    return {
        "activityState": {},
        "payload": None,
        "outputs": None,
        "exception": {"type": "NotSupported", "message": REASON, "stackTrace": None},
        "status": "Faulted",
    }

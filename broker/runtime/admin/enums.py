"""The store's enumerations that the HTTP adapters validate and render with.

The ingress and the console import nothing from ``broker.store.models`` (a contract of
``make lint``); the values a client may send or will read back come from here, as the same
classes the tables use.
"""

from __future__ import annotations

from broker.store.models import DeadLetterKind, InstanceStatus, InstanceSubStatus, RequestStatus

__all__ = ["DeadLetterKind", "InstanceStatus", "InstanceSubStatus", "RequestStatus"]

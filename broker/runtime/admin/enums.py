"""The store's enumerations (the classes the tables use) that the HTTP adapters validate and
render with, so they import nothing from ``broker.store.models`` (docs/design.md, section 1)."""

from __future__ import annotations

from broker.store.models import DeadLetterKind, InstanceStatus, InstanceSubStatus, RequestStatus

__all__ = ["DeadLetterKind", "InstanceStatus", "InstanceSubStatus", "RequestStatus"]

"""Each implementation class's designer description, taken from its ``@activity`` declaration."""

from __future__ import annotations

from broker.engine.activities.base import Behaviour
from broker.engine.activities.catalog import declaration_for
from broker.engine.model.specs import ActivitySpec

__all__ = ["spec_for"]


def spec_for(behaviour: Behaviour) -> ActivitySpec | None:
    """The spec of an implementation's own class (a subclass is never described by its base)."""
    found = declaration_for(behaviour)
    return found.spec if found is not None else None

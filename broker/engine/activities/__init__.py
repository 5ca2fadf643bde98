"""Activity implementations, grouped by family; each declares itself with ``@activity`` and the
catalog is built from the declarations."""

from broker.engine.activities.base import activity
from broker.engine.activities.catalog import CATALOG, TYPE_ALIASES, behaviour_for

__all__ = ["CATALOG", "TYPE_ALIASES", "activity", "behaviour_for"]

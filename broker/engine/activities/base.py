"""The shape every activity implementation has: execute, child completed, resume."""

from __future__ import annotations

from broker.engine.activity_context import Behaviour
from broker.engine.outcomes import DONE, CompletedChild

__all__ = ["DONE", "Behaviour", "CompletedChild"]

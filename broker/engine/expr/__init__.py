"""Expressions: Literal, Variable, Object, JSON, C#-free JavaScript and Liquid, evaluated over a
``Scope``."""

from broker.engine.expr.expressions import SUPPORTED_TYPES, evaluate
from broker.engine.expr.scope import Scope

__all__ = ["SUPPORTED_TYPES", "Scope", "evaluate"]

"""Finding a team's activity packages at start: the modules of ``BROKER_TASK_MODULES`` (the one
setting RunTask uses too) and every module named in the ``broker.activities`` entry point group."""

from __future__ import annotations

import importlib
import logging
from collections.abc import Iterable
from importlib.metadata import entry_points

from broker.activities.adapter import DECLARED
from broker.activities.declaring import ActivityDeclaration
from broker.errors import ActivityDeclarationError
from broker.settings import Settings

__all__ = ["ENTRY_POINT_GROUP", "activity_modules", "load_activities"]

logger = logging.getLogger(__name__)

#: the entry point group a package names its activity modules in (``pyproject.toml``)
ENTRY_POINT_GROUP = "broker.activities"
#: the broker's own task adapters, never a team's module
OWN_MODULES = frozenset({"tasks"})


def activity_modules(settings: Settings) -> list[str]:
    """The modules to import, in order: the task modules, then the entry points' (no repeats)."""
    found = [m for m in settings.task_modules if m and m not in OWN_MODULES]
    for point in entry_points(group=ENTRY_POINT_GROUP):
        module = point.value.partition(":")[0].strip()
        if module and module not in found:
            found.append(module)
    return found


def load_activities(
    settings: Settings, *, modules: Iterable[str] | None = None
) -> dict[str, ActivityDeclaration]:
    """Import every activity module; raise ``ActivityDeclarationError`` naming the module and the
    activity at the first bad declaration or module that does not import (the process stops)."""
    for module in activity_modules(settings) if modules is None else modules:
        try:
            importlib.import_module(module)
        except ActivityDeclarationError as exc:
            raise ActivityDeclarationError(
                f"module {module!r}: {exc.message}", module=module, **exc.details
            ) from exc
        except Exception as exc:
            raise ActivityDeclarationError(
                f"activity module {module!r} does not import: {type(exc).__name__}: {exc}",
                module=module,
            ) from exc
    if DECLARED:
        logger.info("Python activities: %s", ", ".join(DECLARED))
    return dict(DECLARED)

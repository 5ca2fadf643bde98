"""``workflows/README.md`` lists exactly what the broker supports: checked against the catalog.

Each ``<!-- catalog:NAME -->`` block of the README must equal ``BLOCKS[NAME]()``; when one does
not, the failure prints the block to paste.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from broker.engine.activities.catalog import BUILT_IN, TYPE_ALIASES
from broker.engine.expr.expressions import SUPPORTED_TYPES
from broker.engine.model.strategies import (
    ACTIVATION_STRATEGIES,
    INCIDENT_STRATEGIES,
    STORAGE_DRIVERS,
)
from broker.engine.run.interpreter import WORKFLOW_TYPE
from broker.engine.validation import WORKFLOW_OPTIONS
from tests.support.services import PROJECT_ROOT

README = PROJECT_ROOT / "workflows" / "README.md"


def listing(names: object) -> str:
    return ", ".join(f"`{name}`" for name in sorted(names))  # type: ignore[call-overload]


BLOCKS: dict[str, Callable[[], str]] = {
    "activities": lambda: listing(
        name for name in BUILT_IN if name not in TYPE_ALIASES and name != WORKFLOW_TYPE
    ),
    "aliases": lambda: listing(f"{alias} = {name}" for alias, name in TYPE_ALIASES.items()),
    "options": lambda: listing(f"options.{key}" for key in WORKFLOW_OPTIONS),
    "expressions": lambda: listing(SUPPORTED_TYPES),
    "incident-strategies": lambda: listing(INCIDENT_STRATEGIES),
    "activation-strategies": lambda: listing(ACTIVATION_STRATEGIES),
    "storage-drivers": lambda: listing(STORAGE_DRIVERS),
}


def block(text: str, name: str) -> str | None:
    found = re.search(rf"<!-- catalog:{name} -->\n(.*?)\n<!-- /catalog -->", text, re.DOTALL)
    return " ".join(found.group(1).split()) if found else None


@pytest.mark.parametrize("name", sorted(BLOCKS))
def test_the_readme_lists_exactly_what_the_catalog_supports(name: str) -> None:
    expected = BLOCKS[name]()
    assert block(README.read_text(encoding="utf-8"), name) == expected, (
        f"paste into workflows/README.md:\n<!-- catalog:{name} -->\n{expected}\n<!-- /catalog -->"
    )

"""The activity declarations as Studio and the validator see them, pinned: the descriptors that
``/elsa/api/descriptors/activities`` serves, the catalog, the aliases and the fixed ports."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from broker.console.api.activity_descriptors import activity_descriptors
from broker.engine.activities.catalog import BUILT_IN, CATALOG, FIXED_PORTS, TYPE_ALIASES

SNAPSHOT = Path(__file__).with_name("declarations.snapshot.json")


def current() -> dict[str, Any]:
    """The built-in declarations (a team's Python activities, once loaded, are left out)."""
    behaviours = {
        name: type(found).__qualname__ for name, found in CATALOG.items() if name in BUILT_IN
    }
    return {
        "descriptors": [d for d in activity_descriptors() if d["typeName"] in BUILT_IN],
        "catalog": behaviours,
        "aliases": dict(sorted(TYPE_ALIASES.items())),
        "fixedPorts": {
            name: sorted(FIXED_PORTS[name]) for name in sorted(FIXED_PORTS) if name in BUILT_IN
        },
    }


def render() -> str:
    return json.dumps(current(), indent=1, ensure_ascii=False) + "\n"


def test_the_declarations_match_the_snapshot_byte_for_byte() -> None:
    assert render() == SNAPSHOT.read_text(encoding="utf-8")


def test_the_snapshot_keeps_the_catalog_order_studio_lists() -> None:
    pinned = json.loads(SNAPSHOT.read_text(encoding="utf-8"))
    assert [item["typeName"] for item in pinned["descriptors"]] == [
        name for name in CATALOG if name in BUILT_IN
    ]


if __name__ == "__main__":  # regenerate after a deliberate change: python -m <this module>
    SNAPSHOT.write_text(render(), encoding="utf-8")

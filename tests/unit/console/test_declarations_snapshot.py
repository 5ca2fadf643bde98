"""The activity declarations as Studio and the validator see them, pinned: the descriptors that
``/elsa/api/descriptors/activities`` serves, the catalog, the aliases and the fixed ports."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from broker.console.api.activity_descriptors import activity_descriptors
from broker.engine.activities.catalog import CATALOG, FIXED_PORTS, TYPE_ALIASES

SNAPSHOT = Path(__file__).with_name("declarations.snapshot.json")


def current() -> dict[str, Any]:
    behaviours = {name: type(found).__qualname__ for name, found in CATALOG.items()}
    return {
        "descriptors": activity_descriptors(),
        "catalog": behaviours,
        "aliases": dict(sorted(TYPE_ALIASES.items())),
        "fixedPorts": {name: sorted(FIXED_PORTS[name]) for name in sorted(FIXED_PORTS)},
    }


def render() -> str:
    return json.dumps(current(), indent=1, ensure_ascii=False) + "\n"


def test_the_declarations_match_the_snapshot_byte_for_byte() -> None:
    assert render() == SNAPSHOT.read_text(encoding="utf-8")


def test_the_snapshot_keeps_the_catalog_order_studio_lists() -> None:
    pinned = json.loads(SNAPSHOT.read_text(encoding="utf-8"))
    assert [item["typeName"] for item in pinned["descriptors"]] == list(CATALOG)


if __name__ == "__main__":  # regenerate after a deliberate change: python -m <this module>
    SNAPSHOT.write_text(render(), encoding="utf-8")

"""The toolbox inventory: the activities elsa-core's default modules put in Studio's toolbox
(``upstream/activities.tsv``), each found in the engine's catalog or not.

Whether the broker has an activity is read from ``broker.engine.activities.catalog`` every time,
never kept by hand; the inventory keeps only what Elsa has and, for each, what a user loses
without it."""

from __future__ import annotations

import csv
import dataclasses

from broker.engine.activities.catalog import BUILT_IN, CATALOG, TYPE_ALIASES
from tests.conformance.ledger import INVENTORY, LEDGERS, LedgerError

HEADER = ("type", "module", "source", "toolbox", "loses")
TOOLBOX = ("yes", "no")


@dataclasses.dataclass(frozen=True)
class Entry:
    type: str  # Elsa's activity type name
    module: str  # the elsa-core module (src/modules/<module>)
    source: str  # the C# file in elsa-core
    toolbox: bool  # shown in Studio's toolbox (not [Browsable(false)])
    loses: str  # what a user loses where the broker lacks it
    line: int

    @property
    def in_broker(self) -> bool:
        return self.type in CATALOG


def read_inventory() -> list[Entry]:
    path = LEDGERS / INVENTORY
    entries = []
    with path.open(encoding="utf-8", newline="") as handle:
        reader = csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE)
        if tuple(next(reader, None) or ()) != HEADER:
            raise LedgerError(f"{INVENTORY}:1: the header must be {'<TAB>'.join(HEADER)}")
        for number, fields in enumerate(reader, start=2):
            if not fields:
                continue
            if len(fields) != len(HEADER):
                raise LedgerError(f"{INVENTORY}:{number}: {len(fields)} fields, want 5")
            kind, module, source, toolbox, loses = (f.strip() for f in fields)
            if toolbox not in TOOLBOX:
                raise LedgerError(f"{INVENTORY}:{number}: toolbox must be yes or no")
            entries.append(Entry(kind, module, source, toolbox == "yes", loses, number))
    return entries


def toolbox(entries: list[Entry]) -> list[Entry]:
    """The entries Studio's toolbox shows (the counted ones)."""
    return [e for e in entries if e.toolbox]


def missing(entries: list[Entry]) -> list[Entry]:
    """The toolbox activities the engine's catalog lacks."""
    return [e for e in toolbox(entries) if not e.in_broker]


def activities_line(entries: list[Entry]) -> str:
    shown = toolbox(entries)
    lacking = missing(entries)
    return f"activities elsa={len(shown)} broker={len(shown) - len(lacking)} missing={len(lacking)}"


def catalog_types() -> list[str]:
    """The engine catalog's own type names (aliases left out)."""
    return sorted(name for name in BUILT_IN if name not in TYPE_ALIASES)

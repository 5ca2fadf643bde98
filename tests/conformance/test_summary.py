"""The two summary lines ``make conformance`` ends with."""

from __future__ import annotations

import re

import pytest

from broker.engine.activities import catalog
from tests.conformance.ledger import read_ledgers
from tests.conformance.summary import summary_line
from tests.conformance.toolbox import activities_line, missing, read_inventory, toolbox

LINE = re.compile(
    r"elsa_cases=(\d+) passed=(\d+) known_differences=(\d+) "
    r"upstream_tests=(\d+) ported=(\d+) not_implemented=(\d+) not_portable=(\d+)"
)
ACTIVITIES = re.compile(r"activities elsa=(\d+) broker=(\d+) missing=(\d+)")


def test_the_summary_line_counts_cases_and_ledger_rows() -> None:
    # Given the cases and ledgers, When the line is written for 7 passed cases
    match = LINE.fullmatch(summary_line(7))
    # Then it has every field, and the ledger's rows split into the three statuses
    assert match is not None
    cases, passed, _, upstream, ported, not_implemented, not_portable = map(int, match.groups())
    assert passed == 7
    assert upstream == len(read_ledgers()) == ported + not_implemented + not_portable
    assert cases > 0


def test_the_activities_line_splits_the_toolbox_into_present_and_missing() -> None:
    # Given the inventory of Studio's toolbox under elsa-core's default modules
    entries = read_inventory()
    # When the line is written
    match = ACTIVITIES.fullmatch(activities_line(entries))
    # Then elsa counts the toolbox, and broker plus missing add up to it
    assert match is not None
    elsa, broker, lacking = map(int, match.groups())
    assert elsa == len(toolbox(entries)) == broker + lacking
    assert lacking == len(missing(entries))


def test_the_activities_line_reads_the_engines_catalog(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a toolbox activity the broker has
    entries = read_inventory()
    present = next(e for e in toolbox(entries) if e.in_broker)
    before = len(missing(entries))
    # When the engine's catalog loses it, Then it is counted missing without editing the inventory
    monkeypatch.delitem(catalog.CATALOG, present.type)
    assert len(missing(entries)) == before + 1
    assert present in missing(entries)


def test_every_missing_toolbox_activity_says_what_a_user_loses() -> None:
    # Given the toolbox activities the catalog lacks, Then each names what a user loses
    silent = [e.type for e in missing(read_inventory()) if not e.loses]
    assert not silent, f"activities.tsv: say what a user loses without {silent}"


def test_the_inventory_lists_each_activity_once() -> None:
    types = [e.type for e in read_inventory()]
    assert len(types) == len(set(types)), types

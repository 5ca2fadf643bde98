"""docs/conformance.md is generated from the ledgers and cases, and kept up to date."""

from __future__ import annotations

from tests.conformance.loader import corpus_cases
from tests.conformance.report import DOC, render
from tests.support.services import require_corpus


def test_the_committed_conformance_table_is_up_to_date() -> None:
    require_corpus(corpus_cases())  # the totals count the public corpus too
    # Given the ledgers and cases, When the report is rendered, Then it equals the committed file
    assert DOC.read_text(encoding="utf-8") == render(), (
        "docs/conformance.md is stale: run `python -m tests.conformance.report --write`"
    )

"""The summary line ``make conformance`` ends with."""

from __future__ import annotations

import re

from tests.conformance.ledger import read_ledgers
from tests.conformance.summary import summary_line

LINE = re.compile(
    r"elsa_cases=(\d+) passed=(\d+) known_differences=(\d+) "
    r"upstream_tests=(\d+) ported=(\d+) not_portable=(\d+)"
)


def test_the_summary_line_counts_cases_and_ledger_rows() -> None:
    # Given the cases and ledgers, When the line is written for 7 passed cases
    match = LINE.fullmatch(summary_line(7))
    # Then it has every field, and the ledger's rows split into ported and not portable
    assert match is not None
    cases, passed, _, upstream, ported, not_portable = map(int, match.groups())
    assert passed == 7
    assert upstream == len(read_ledgers()) == ported + not_portable
    assert cases > 0

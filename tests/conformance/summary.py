"""``make conformance``: runs the conformance tests, then prints the two summary lines last.

    elsa_cases=N passed=P known_differences=K
        upstream_tests=T ported=C not_implemented=I not_portable=U   (one line)
    activities elsa=A broker=B missing=M

Exits non-zero when any test failed (a case, a strict known difference that passed, the ledger
or the report check)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.conformance.ledger import read_ledgers
from tests.conformance.loader import all_cases
from tests.conformance.report import summary_counts
from tests.conformance.toolbox import activities_line, read_inventory

HERE = Path(__file__).resolve().parent
CASE_TEST = "test_elsa_case["


class CaseOutcomes:
    """A pytest plugin that counts the case tests that passed."""

    def __init__(self) -> None:
        self.passed: set[str] = set()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        passed = report.when == "call" and report.passed and not hasattr(report, "wasxfail")
        if passed and CASE_TEST in report.nodeid:
            self.passed.add(report.nodeid)


def summary_line(passed: int) -> str:
    counts = summary_counts(read_ledgers(), all_cases())
    return (
        f"elsa_cases={counts['elsa_cases']} passed={passed} "
        f"known_differences={counts['known_differences']} "
        f"upstream_tests={counts['upstream_tests']} ported={counts['ported']} "
        f"not_implemented={counts['not_implemented']} not_portable={counts['not_portable']}"
    )


def main(argv: list[str]) -> int:
    outcomes = CaseOutcomes()
    code = pytest.main([str(HERE), "-q", "-p", "no:randomly", *argv], plugins=[outcomes])
    print(summary_line(len(outcomes.passed)), flush=True)
    print(activities_line(read_inventory()), flush=True)
    return int(code)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

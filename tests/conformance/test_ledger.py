"""The ledgers account for every upstream test exactly once and agree with the case folders."""

from __future__ import annotations

import collections

from tests.conformance.ledger import Row, ledger_files, problems, read_ledgers
from tests.conformance.loader import corpus_cases, project_cases
from tests.support.services import require_corpus


def test_every_ledger_row_is_well_formed() -> None:
    # Given every ledger, When each row is checked, Then none has a problem
    found = [problem for row in read_ledgers() for problem in problems(row)]
    assert not found, "\n".join(found)


def test_no_upstream_test_is_listed_twice() -> None:
    counts = collections.Counter((row.file, row.test) for row in read_ledgers())
    twice = [f"{file} {test}" for (file, test), n in counts.items() if n > 1]
    assert not twice, twice


def test_every_ported_row_names_existing_cases() -> None:
    # A row may name a public corpus case (the corpus ports some of these tests already).
    corpus = corpus_cases()
    require_corpus(corpus)
    known = {case.id for case in project_cases() + corpus}
    missing = [
        f"{row.where}: {case}"
        for row in read_ledgers()
        if row.status == "ported"
        for case in row.cases
        if case not in known
    ]
    assert not missing, missing


def test_every_project_case_is_named_by_a_row_or_marked_extra() -> None:
    named = {case for row in read_ledgers() for case in row.cases}
    orphans = [
        case.id
        for case in project_cases()
        if case.id not in named and not case.expected.get("extra")
    ]
    assert not orphans, f'cases no ledger row names (mark them "extra": "why"): {orphans}'


def test_a_ported_case_cites_the_test_file_its_row_names() -> None:
    cases = {case.id: case for case in project_cases()}
    wrong = [
        f"{row.where}: {case_id} cites {cases[case_id].expected.get('test')}"
        for row in read_ledgers()
        for case_id in row.cases
        if case_id in cases
        and row.file != cases[case_id].expected.get("test")
        and row.file not in (cases[case_id].expected.get("alsoTests") or ())
    ]
    assert not wrong, wrong


def test_the_ledgers_exist() -> None:
    assert ledger_files(), "no ledger under tests/conformance/upstream"


def row(status: str, reason: str, cases: tuple[str, ...] = ()) -> Row:
    return Row("Suite", "test/x/Tests.cs", "Runs", status, cases, reason, 2)


def test_a_not_implemented_row_names_its_missing_piece() -> None:
    # Given rows of the three statuses, Then only well-formed ones pass
    assert not problems(row("not_implemented", "needs StateMachine activity: a state machine"))
    assert row("not_implemented", "needs StateMachine activity: x").needs == "StateMachine activity"
    assert problems(row("not_implemented", "a state machine"))  # no "needs <piece>:"
    assert problems(row("not_implemented", "needs x: y", ("case-1",)))  # a gap has no case
    assert problems(row("not_portable", ""))  # a reason is required
    assert problems(row("ported", ""))  # a ported row names its case
    assert problems(row("skipped", "why"))  # not a status

"""Every conformance case, one test id each: the public Elsa corpus (outside the project, never
copied in) and the project's ported cases in ``tests/conformance/cases``.

A case with ``knownDifference`` must fail (strict xfail: once it passes, remove the marker); a
case with ``refused`` must be refused at load with the JSON path it names."""

from __future__ import annotations

import pytest

from broker.engine.validation import validate_document
from broker.errors import WorkflowDefinitionError
from tests.conformance.checks import check
from tests.conformance.driver import Budget, run_case
from tests.conformance.loader import Case, all_cases, load_definitions, read_json
from tests.conformance.system import DRIVER, run_broker_case
from tests.support.services import require_corpus

CASES = all_cases()
CORPUS_FOUND = any(case.origin == "corpus" for case in CASES)
#: what a project case must say about where it comes from (a broker case: steps, not expect)
CITATION_KEYS = ("suite", "test", "testName", "entry", "entryDefinitionId")


def params(cases: list[Case]) -> list[object]:
    marked = []
    for case in cases:
        marks = []
        if case.known_difference is not None:
            reason = case.known_difference.get("reason", "known difference")
            marks.append(pytest.mark.xfail(strict=True, reason=str(reason)))
        marked.append(pytest.param(case, id=case.id, marks=marks))
    return marked


@pytest.mark.parametrize("case", params(CASES))
def test_elsa_case(case: Case) -> None:
    if case.refused is not None:
        check_refused(case)
        return
    if case.expected.get("driver") == DRIVER:
        # Given the case's files published on a broker of its own, When each step calls its
        # ingress or its Elsa API, Then each response is as the step expects
        with Budget(case):
            run_broker_case(case)
        return
    # Given the case's definitions, registered by version and definition id
    # When it runs as its runMode says, Then every phase's expectations hold
    for phase in run_case(case):
        check(phase.run, phase.expect, phase.label)


def check_refused(case: Case) -> None:
    refused = case.refused
    assert refused is not None
    entry = case.expected["entry"]
    # Given the other files load
    load_definitions(case, skip=entry)
    # When the entry file is read and checked, Then it is refused naming the JSON path
    with pytest.raises(WorkflowDefinitionError) as raised:
        validate_document(read_json(case.folder / entry), file=entry)
    assert raised.value.path == refused["path"], str(raised.value)
    assert str(refused.get("contains", "")) in str(raised.value), str(raised.value)


def test_the_public_corpus_is_found() -> None:
    require_corpus(CORPUS_FOUND)


@pytest.mark.parametrize("case", [c for c in CASES if c.origin == "project"], ids=lambda c: c.id)
def test_project_case_cites_its_upstream_test(case: Case) -> None:
    expected = case.expected
    checks = "steps" if expected.get("driver") == DRIVER else "expect"
    missing = [key for key in (*CITATION_KEYS, checks) if key not in expected]
    assert not missing, f"{case.id}: expected.json lacks {missing}"
    assert isinstance(expected["testName"], list), case.id
    assert expected["testName"], case.id
    assert (case.folder / expected["entry"]).is_file(), f"{case.id}: no entry file"
    if expected.get("translated"):
        files = sorted(p.name for p in case.folder.glob("*.json") if p.name != "expected.json")
        assert sorted(expected.get("sources") or {}) == files, (
            f"{case.id}: sources must map each workflow file to the C# file it was translated from"
        )
    difference = case.known_difference
    if difference is not None:
        assert difference.get("reason"), case.id
        assert difference.get("needs"), case.id

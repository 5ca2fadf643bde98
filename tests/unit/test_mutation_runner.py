"""``make mutation``'s own pieces (docs/mutation.md): the equivalent-mutant list, the module map
that orders each mutant's tests, and the selection they must both cover."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.mutation import launch, run

PROJECT_ROOT = Path(__file__).resolve().parents[2]


def selected_modules() -> set[str]:
    return {pattern.split(".x", 1)[0].removesuffix(".*") for pattern in run.SELECTION}


def test_every_mutated_module_names_the_tests_written_for_it() -> None:
    # Given the selection of mutated functions, then each module has its own tests to run first
    assert selected_modules() == set(launch.OWN_TESTS)
    for marks in launch.OWN_TESTS.values():
        for mark in marks:
            assert list(PROJECT_ROOT.glob(f"tests/**/{mark}*.py")), f"no test file matches {mark}"


def test_a_mutants_own_tests_are_those_of_its_module_only() -> None:
    tests = [
        "tests/unit/runtime/test_statuses.py::test_a",
        "tests/unit/test_clients.py::test_b",
        "tests/integration/test_request_invariants.py::test_c[sqlite]",
        "tests/unit/test_unrecorded.py::test_d",
    ]
    durations = {tests[0]: 0.5, tests[1]: 0.1, tests[2]: 2.0}
    own = launch.own_tests("broker.runtime.requests.transitions.x_move__mutmut_3", tests, durations)
    assert own == {tests[0]: 0.5, tests[2]: 2.0}
    own = launch.own_tests(
        "broker.clients.registry.xǁClientRegistryǁauthenticate__mutmut_1", tests, durations
    )
    assert own == {tests[1]: 0.1}
    assert launch.own_tests("broker.elsewhere.x_f__mutmut_1", tests, durations) == {}


def test_the_equivalent_list_gives_each_mutant_of_the_selection_a_reason() -> None:
    entries = run.read_equivalent(run.EQUIVALENT)
    assert set(entries) == launch.equivalent_names(run.EQUIVALENT)
    modules = selected_modules()
    for name, reason in entries.items():
        assert name.split(".x", 1)[0] in modules, name
        assert "__mutmut_" in name
        assert len(reason) > 10, name


def test_an_equivalent_mutant_without_its_reason_is_refused(tmp_path: Path) -> None:
    listed = tmp_path / "equivalent.txt"
    listed.write_text(
        "# comment\nbroker.outbound.urls.x_f__mutmut_1 a reason\n"
        "broker.outbound.urls.x_f__mutmut_2\n"
    )
    with pytest.raises(
        SystemExit,
        match=re.escape("equivalent.txt:3: broker.outbound.urls.x_f__mutmut_2 has no reason"),
    ):
        run.read_equivalent(listed)


def test_type_errors_are_matched_to_the_mutant_functions_that_hold_them() -> None:
    # Given a mutated file: a module function, a class with a decorated mutant method, and a
    # function of the project's own that is no mutant
    source = "\n".join(
        [
            "def x_move__mutmut_1(a):",  # 1
            "    def inner__mutmut_9(): pass",  # 2: inside a function, not a mutant of its own
            "    return a",  # 3
            "class Registry:",  # 4
            "    @classmethod",  # 5
            "    def xǁRegistryǁload__mutmut_2(cls):",  # 6
            "        return cls",  # 7
            "def helper():",  # 8
            "    return 1",  # 9
        ]
    )
    path = Path("broker/example.py")
    found = [
        (f.function_name, f.line_number_start, f.line_number_end)
        for f in launch.mutated_functions(path, source)
    ]
    # Then each mutant spans its def to its last line, as mutmut's own parser reads them
    assert found == [("x_move__mutmut_1", 1, 3), ("xǁRegistryǁload__mutmut_2", 6, 7)]

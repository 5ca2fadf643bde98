"""mutmut's command line with four changes that alter no verdict (``make mutation`` runs it; see
docs/mutation.md):

- ``--fresh``: no second run of the selected tests without a mutant. Mapping which test reaches
  which function has just run the same tests, also without a mutant, and mutmut stops there when
  one fails. A run that reuses an old map keeps mutmut's clean run.
- the tests written for a module run first against its mutants (``OWN_TESTS``), then the others,
  each group fastest first. mutmut orders by duration alone, so a mutant of a function that
  hundreds of tests reach (the client registry, the status machine) ran dozens of unrelated
  tests before the one that kills it. The same tests run and a survivor still runs them all;
  only the order changes.
- the mutants of ``equivalent.txt`` are not tested: each has a reason it cannot change behaviour,
  so no test can kill it, and a mutant no test kills runs every test that reaches its function.
  They are recorded as skipped; the runner reports them as equivalent.
- the type checker's errors are matched to mutants with Python's own parser instead of libcst's
  (which took minutes to find the same function spans in the mutated files).

Run as a script (``python tests/mutation/launch.py [--fresh] run ...``), not as a module: the
mutmut process must not import the project's ``tests`` package, which mutmut imports again from
its copy of the project.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path
from typing import Any

import mutmut.__main__
from mutmut.__main__ import cli
from mutmut.configuration import config
from mutmut.mutation.file_mutation import (
    FailedTypeCheckMutant,
    MutatedMethodLocation,
    group_by_path,
)
from mutmut.state import state
from mutmut.type_checking import run_type_checker
from mutmut.utils.file_utils import change_cwd
from mutmut.utils.format_utils import get_mutant_name, is_mutated_method_name
from mutmut.workers.isolation import ForkRunner, MutantResult

#: mutmut's exit code for a mutant it did not test on purpose
SKIPPED = 34

#: per mutated module, the parts of a test's path that mark it as written for that module
OWN_TESTS: dict[str, tuple[str, ...]] = {
    "broker.runtime.requests.transitions": ("test_statuses", "test_request_invariants"),
    "broker.runtime.requests.submission": (
        "test_submission",
        "test_request_invariants",
        "test_submit",
        "test_ingress_requests",
    ),
    "broker.runtime.requests.group_commit": ("test_group_commit",),
    "broker.runtime.outbox.rows": ("test_outbox",),
    "broker.store.db": ("test_store_leases", "test_outbox_relay"),
    "broker.runtime.failures.retry": ("test_runtime_retry",),
    "broker.runtime.bookmarks.queue": ("test_bookmark",),
    "broker.adapters.locks": ("test_lock",),
    "broker.clients.registry": ("test_clients", "test_ingress_auth"),
    "broker.clients.entries": ("test_clients", "test_ingress_auth"),
    "broker.ingress.auth": ("test_ingress_auth",),
    "broker.outbound.http_client": ("test_outbound",),
    "broker.outbound.guard": ("test_outbound",),
    "broker.outbound.urls": ("test_outbound",),
}


def equivalent_names(path: Path) -> set[str]:
    """The mutant names of ``equivalent.txt`` (the runner checks each has its reason)."""
    names = set()
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            names.add(line.split()[0])
    return names


def own_tests(mutant_name: str, tests: list[str], durations: dict[str, float]) -> dict[str, float]:
    """The recorded durations of the tests, among ``tests``, written for the mutant's module."""
    marks = OWN_TESTS.get(mutant_name.split(".x", 1)[0], ())
    return {t: durations[t] for t in tests if t in durations and any(m in t for m in marks)}


def mutated_functions(path: Path, source: str) -> list[MutatedMethodLocation]:
    """The mutant functions of a mutated file with their lines (from ``def``, decorators left
    out), as mutmut's libcst visitor finds them: at any depth outside a function, none inside."""
    found: list[MutatedMethodLocation] = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                if is_mutated_method_name(child.name):
                    last = child.end_lineno or child.lineno
                    found.append(MutatedMethodLocation(path, child.name, child.lineno, last))
            else:
                visit(child)

    visit(ast.parse(source))
    return found


def filter_with_type_checker() -> dict[str, FailedTypeCheckMutant]:
    """mutmut's ``filter_mutants_with_type_checker``, its file parser aside: every type error
    must fall in a mutant function, which the type checker thereby refuses."""
    with change_cwd(Path("mutants")):
        refused: dict[str, FailedTypeCheckMutant] = {}
        for path, errors in group_by_path(run_type_checker(config().type_check_command)).items():
            functions = mutated_functions(path, path.read_text(encoding="utf-8"))
            if not functions:
                continue
            for error in errors:
                function = next(
                    (
                        f
                        for f in functions
                        if f.line_number_start <= error.line_number <= f.line_number_end
                    ),
                    None,
                )
                if function is None:
                    raise SystemExit(
                        f"type error outside any mutant: {error.file_path}:{error.line_number}"
                        f" ({error.error_description})"
                    )
                name = get_mutant_name(path.relative_to(Path.cwd()), function.function_name)
                refused[name] = FailedTypeCheckMutant(function, name, error)
        return refused


def main(argv: list[str]) -> None:
    skip = equivalent_names(Path(__file__).with_name("equivalent.txt"))
    submit = ForkRunner.submit

    def submit_unless_equivalent(
        self: ForkRunner, mutant_name: str, tests: list[str], *args: Any, **kwargs: Any
    ) -> None:
        if mutant_name in skip:
            self._no_tests_results.append(MutantResult(mutant_name, SKIPPED, 0.0))
            return
        # The child sorts its tests by recorded duration: the module's own tests go first by
        # counting as faster than any other while the child forks, then the figures come back.
        durations = state().duration_by_test
        own = own_tests(mutant_name, tests, durations)
        for test, seconds in own.items():
            durations[test] = seconds - 1e6
        try:
            submit(self, mutant_name, tests, *args, **kwargs)
        finally:
            durations.update(own)

    ForkRunner.submit = submit_unless_equivalent  # type: ignore[method-assign]
    mutmut.__main__.filter_mutants_with_type_checker = filter_with_type_checker  # type: ignore[attr-defined]
    if argv and argv[0] == "--fresh":
        argv = argv[1:]
        ForkRunner.run_clean_tests = lambda self, tests: 0  # type: ignore[method-assign]
    sys.argv = ["mutmut", *argv]
    cli()


if __name__ == "__main__":
    main(sys.argv[1:])

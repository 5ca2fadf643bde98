"""mutmut's command line with two cuts that change no verdict (``make mutation`` runs it; see
docs/mutation.md):

- ``--fresh``: no second run of the selected tests without a mutant. Mapping which test reaches
  which function has just run the same tests, also without a mutant, and mutmut stops there when
  one fails. A run that reuses an old map keeps mutmut's clean run.
- the mutants of ``equivalent.txt`` are not tested: each has a reason it cannot change behaviour,
  so no test can kill it, and a mutant no test kills runs every test that reaches its function.
  They are recorded as skipped; the runner reports them as equivalent.

Run as a script (``python tests/mutation/launch.py [--fresh] run ...``), not as a module: the
mutmut process must not import the project's ``tests`` package, which mutmut imports again from
its copy of the project.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from mutmut.__main__ import cli
from mutmut.workers.isolation import ForkRunner, MutantResult

#: mutmut's exit code for a mutant it did not test on purpose
SKIPPED = 34


def equivalent_names(path: Path) -> set[str]:
    """The mutant names of ``equivalent.txt`` (the runner checks each has its reason)."""
    names = set()
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            names.add(line.split()[0])
    return names


def main(argv: list[str]) -> None:
    skip = equivalent_names(Path(__file__).with_name("equivalent.txt"))
    submit = ForkRunner.submit

    def submit_unless_equivalent(
        self: ForkRunner, mutant_name: str, tests: list[str], *args: Any, **kwargs: Any
    ) -> None:
        if mutant_name in skip:
            self._no_tests_results.append(MutantResult(mutant_name, SKIPPED, 0.0))
            return
        submit(self, mutant_name, tests, *args, **kwargs)

    ForkRunner.submit = submit_unless_equivalent  # type: ignore[method-assign]
    if argv and argv[0] == "--fresh":
        argv = argv[1:]
        ForkRunner.run_clean_tests = lambda self, tests: 0  # type: ignore[method-assign]
    sys.argv = ["mutmut", *argv]
    cli()


if __name__ == "__main__":
    main(sys.argv[1:])

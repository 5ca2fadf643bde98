"""docs/design.md is where docstrings point: every section they cite exists there."""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.services import PROJECT_ROOT

DESIGN = PROJECT_ROOT / "docs" / "design.md"
CITATION = re.compile(r"docs/design\.md,\s+section\s+(\d+)")


def sources() -> list[Path]:
    return sorted(
        path
        for package in ("broker", "tasks")
        for path in (PROJECT_ROOT / package).rglob("*.py")
        if "migrations" not in path.parts
    )


def test_every_cited_design_section_exists() -> None:
    # Given the numbered sections of docs/design.md
    sections = set(re.findall(r"^## (\d+)\. ", DESIGN.read_text(), flags=re.MULTILINE))
    assert sections, "docs/design.md has no numbered sections"
    # When every source file's citations are read
    cited = {
        (path.relative_to(PROJECT_ROOT).as_posix(), number)
        for path in sources()
        for number in CITATION.findall(path.read_text())
    }
    # Then each names a section that is there, and some file cites one
    assert cited
    missing = sorted(item for item in cited if item[1] not in sections)
    assert not missing, f"docstrings cite sections docs/design.md does not have: {missing}"


def test_no_docstring_cites_a_document_outside_the_repository() -> None:
    offenders = [
        path.relative_to(PROJECT_ROOT).as_posix()
        for path in sources()
        if re.search(r"\bDESIGN\b", path.read_text())
    ]
    assert not offenders, f"cite docs/design.md instead of DESIGN in: {offenders}"

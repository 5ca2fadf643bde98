"""Conformance cases: the public corpus (outside the project) and the project's own ported cases,
read into one shape; the format is described in ``docs/conformance.md``."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from broker.engine.model.definition import WorkflowDefinition
from broker.engine.parser import parse_workflow
from tests.support.services import CORPUS

#: the project's ported cases, one folder each
PROJECT_CASES = Path(__file__).resolve().parent / "cases"
EXPECTED = "expected.json"


@dataclasses.dataclass(frozen=True)
class Case:
    """One case folder: its id, where it lives and its ``expected.json``."""

    id: str
    folder: Path
    expected: Mapping[str, Any]
    origin: str  # "corpus" or "project"

    @property
    def known_difference(self) -> Mapping[str, Any] | None:
        value = self.expected.get("knownDifference")
        return value if isinstance(value, Mapping) else None

    @property
    def refused(self) -> Mapping[str, Any] | None:
        value = self.expected.get("refused")
        return value if isinstance(value, Mapping) else None


def read_json(path: Path) -> Any:
    # Some upstream files start with a UTF-8 BOM.
    return json.loads(path.read_text(encoding="utf-8-sig"))


def case_folders(root: Path) -> list[Path]:
    if not root.is_dir():
        return []
    return sorted(p.parent for p in root.glob(f"*/{EXPECTED}"))


def load_case(folder: Path, origin: str) -> Case:
    return Case(folder.name, folder, read_json(folder / EXPECTED), origin)


def corpus_cases() -> list[Case]:
    return [load_case(folder, "corpus") for folder in case_folders(CORPUS)]


def project_cases() -> list[Case]:
    return [load_case(folder, "project") for folder in case_folders(PROJECT_CASES)]


def all_cases() -> list[Case]:
    return corpus_cases() + project_cases()


def workflow_files(case: Case) -> list[Path]:
    return [p for p in sorted(case.folder.glob("*.json")) if p.name != EXPECTED]


def load_definitions(case: Case, *, skip: str | None = None) -> dict[str, WorkflowDefinition]:
    """Parse every workflow file of the case (``skip``: a file left out, e.g. one to be refused)."""
    return {
        path.name: parse_workflow(read_json(path), file=path.name)
        for path in workflow_files(case)
        if path.name != skip
    }

"""``broker workflows diagram FILE``: a workflow file as a Mermaid flowchart."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from broker.cli.workflows import workflows
from broker.engine.model.diagram import to_mermaid
from tests.support.services import PROJECT_ROOT

INVOICE = PROJECT_ROOT / "workflows" / "invoice-process.json"


def test_diagram_prints_the_files_mermaid_flowchart() -> None:
    # When the shipped invoice workflow is drawn
    result = CliRunner().invoke(workflows, ["diagram", str(INVOICE)])
    # Then stdout is the Mermaid text of the document, nothing else
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("flowchart TD\n")

    assert result.stdout == to_mermaid(json.loads(INVOICE.read_text(encoding="utf-8-sig")))


def test_diagram_of_a_file_that_is_not_a_workflow_exits_1_with_the_reason(tmp_path: Path) -> None:
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    rootless = tmp_path / "rootless.json"
    rootless.write_text('{"definitionId": "x"}')
    for path, reason in ((broken, "invalid JSON"), (rootless, "no root activity")):
        result = CliRunner().invoke(workflows, ["diagram", str(path)])
        assert result.exit_code == 1
        assert reason in result.stderr
        assert str(path) in result.stderr
        assert result.stdout == ""


def test_diagram_of_a_missing_file_is_a_usage_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(workflows, ["diagram", str(tmp_path / "none.json")])
    assert result.exit_code == 2

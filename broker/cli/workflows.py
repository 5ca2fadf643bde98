"""``broker workflows``: list, validate and draw the workflow files (no running services needed)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from broker.errors import BrokerError, WorkflowDefinitionError

if TYPE_CHECKING:
    from broker.registry.files import WorkflowFile
from broker.settings import get_settings


@click.group()
def workflows() -> None:
    """List, validate and draw workflow files."""


@workflows.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
def list_workflows(as_json: bool) -> None:
    """List the workflows found in BROKER_WORKFLOW_PATHS and any problems (exit 1 if any)."""
    from broker.wiring import cli as cli_wiring

    # without a session factory: scans the folders, publishes nothing
    registry = cli_wiring.workflow_registry(database=False)
    rows = [
        {
            "definitionId": w.definition_id,
            "version": w.version,
            "name": w.name,
            "requestType": w.request_type,
            "queue": w.queue,
            "file": w.source_path,
        }
        for w in registry.definitions()
    ]
    problems = [{"file": p.file, "reason": p.reason} for p in registry.problems]
    if as_json:
        page = {"items": rows, "totalCount": len(rows), "page": 0, "pageSize": len(rows)}
        click.echo(json.dumps({**page, "problems": problems}, indent=2))
    else:
        for row in rows:
            click.echo(
                f"{row['requestType'] or '-':<24} {row['definitionId']:<28} "
                f"v{row['version']:<4} {row['queue'] or '-':<28} {row['file']}"
            )
        for p in problems:
            click.echo(f"PROBLEM {p['file']}: {p['reason']}", err=True)
    sys.exit(1 if problems else 0)


def _load(path: Path) -> dict[str, Any]:
    text = path.read_text(encoding="utf-8-sig")
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise WorkflowDefinitionError(f"invalid JSON: {exc}", file=str(path)) from exc
    if not isinstance(document, dict):
        raise WorkflowDefinitionError("a workflow file holds a JSON object", file=str(path))
    return document


@workflows.command()
@click.argument("files", nargs=-1, type=click.Path(exists=True, dir_okay=False, path_type=Path))
def validate(files: tuple[Path, ...]) -> None:
    """Validate workflow FILES (default: every file in BROKER_WORKFLOW_PATHS); exit 1 on errors."""
    from broker.activities import load_activities
    from broker.registry.files import parse_workflow_document, unresolved_activity

    try:  # the team's Python activities are known types, and a bad declaration is an error
        load_activities(get_settings())
    except BrokerError as exc:
        raise click.ClickException(exc.message) from None
    if not files:
        roots = [Path(p) for p in get_settings().workflow_paths]
        files = tuple(sorted(f for root in roots for f in root.rglob("*.json")))
    failed = 0
    valid: list[WorkflowFile] = []
    for path in files:
        try:
            valid.append(parse_workflow_document(_load(path), file=str(path)))
        except WorkflowDefinitionError as exc:
            failed += 1
            click.echo(f"INVALID {exc}", err=True)
    # Activity types defined by other files: the files checked, and those in the folders.
    known = valid + _folder_files()
    for wf in valid:
        error = unresolved_activity(wf, known)
        if error is not None:
            failed += 1
            click.echo(f"INVALID {error}", err=True)
        else:
            click.echo(f"ok      {wf.source_path}")
    sys.exit(1 if failed else 0)


@workflows.command()
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
def diagram(file: Path) -> None:
    """Print FILE's activity graph as a Mermaid flowchart (paste it into a Markdown file or
    mermaid.live); exit 1 when FILE is not a workflow document."""
    from broker.engine.model.diagram import to_mermaid

    try:
        document = _load(file)
        if not isinstance(document.get("root"), dict):
            raise WorkflowDefinitionError("no root activity to draw", file=str(file), path="$.root")
        click.echo(to_mermaid(document), nl=False)
    except WorkflowDefinitionError as exc:
        click.echo(f"INVALID {exc}", err=True)
        sys.exit(1)


def _folder_files() -> list[WorkflowFile]:
    """The valid files of the configured workflow folders."""
    from broker.registry.files import read_workflow_file, scan_folder

    found: list[WorkflowFile] = []
    for root in get_settings().workflow_paths:
        if not Path(root).is_dir():
            continue
        for path in scan_folder(Path(root)):
            try:
                found.append(read_workflow_file(path))
            except (OSError, WorkflowDefinitionError):
                continue
    return found
